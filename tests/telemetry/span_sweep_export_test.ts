/**
 * Runs that end without a worker's report still get their spans, through the sweep, over Deno's
 * default OTLP protocol (http/protobuf, decoded by the test's own decoder): a run cancelled from SQL
 * while a worker runs its first attempt, a run failed by stalled recovery, and a run cancelled while
 * no worker was alive (its span comes when a worker next runs). Each run and step span arrives
 * once, in the trace of the client call that started its run, under the right parents.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { type Child, killChild } from "../e2e/process.ts";
import { runTracedClient, startTracedWorker, stopTracedWorker } from "./children.ts";
import { type ReceivedSpan, startReceiver } from "./otlp_receiver.ts";
import { MARKERS } from "./fixtures/traced_flow.ts";
import { runTrace, stepSpanId } from "../../src/telemetry/span_ids.ts";

const db = testDatabase(import.meta.url);
const CANCEL_MARK = "CANCEL-MARK-3b8e";

db.test("runs ended with no worker's report get their spans once, over protobuf", async ({ sql, url }) => {
  const receiver = startReceiver();
  // No OTEL_EXPORTER_OTLP_PROTOCOL: Deno's default, http/protobuf, for its spans and ours.
  const otel = {
    DATABASE_URL: url,
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
  };
  const startWorker = async (): Promise<Child> => {
    const worker = startTracedWorker({ ...otel, OTEL_SERVICE_NAME: "worker" });
    await waitFor(
      () =>
        sql`select 1 from pgflow.workers where queue_name = 'otel_flow' and stopped_at is null`
          .then((r) => r.length > 0),
      { what: `the worker to register; output:\n${worker.output()}`, timeoutMs: 120_000 },
    );
    return worker;
  };
  /** Starts a run inside a client's span; its run id, trace id and the client's span id. */
  const startRun = (env: Record<string, string>) =>
    runTracedClient({ ...otel, ...env, OTEL_SERVICE_NAME: "client" });
  const ofRun = (id: string) => (s: ReceivedSpan) => s.attributes["pgflow.run_id"] === id;
  const endedOf = (id: string) =>
    receiver.spans.filter((s) => /^pgflow\.(run|step) /.test(s.name) && ofRun(id)(s));

  await defineFlow(sql, "otel_stall", [{ slug: "a", timeout: 5 }], { maxAttempts: 1 });
  let worker = await startWorker();
  try {
    // 1. Cancelled from SQL while the worker runs its first attempt.
    const cancelled = await startRun({ HOLD: "true" });
    await waitFor(
      () =>
        sql`select 1 from pgflow.step_tasks
            where run_id = ${cancelled.runId}::uuid and step_slug = 'a' and status = 'started'`
          .then((r) => r.length > 0),
      { what: `a's attempt to start; worker output:\n${worker.output()}`, timeoutMs: 60_000 },
    );
    await sql`select pgflow.cancel_run(${cancelled.runId}::uuid, ${CANCEL_MARK})`;

    // 2. Failed by stalled recovery: claimed by a worker that vanished, its attempts used up.
    const stalled = await startRun({ FLOW: "otel_stall" });
    const gone = await registerWorker(sql, "otel_stall");
    assert.equal((await readAndStart(sql, "otel_stall", gone, [["otel_stall", "a"]])).length, 1);
    await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour'
              where run_id = ${stalled.runId}::uuid`;
    assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 1);

    await waitFor(
      () => endedOf(cancelled.runId).length >= 4 && endedOf(stalled.runId).length >= 2,
      {
        what: `the swept spans; worker output:\n${worker.output()}`,
        timeoutMs: 60_000,
      },
    );
    await stopTracedWorker(worker);

    // 3. Cancelled while no worker runs: swept when one next starts.
    const orphan = await startRun({ HOLD: "true" });
    await sql`select pgflow.cancel_run(${orphan.runId}::uuid)`;
    worker = await startWorker();
    await waitFor(() => endedOf(orphan.runId).length >= 4, {
      what: `the orphan's spans; worker output:\n${worker.output()}`,
      timeoutMs: 60_000,
    });
    // A stop ends the process, which flushes what Deno's exporter still holds.
    await stopTracedWorker(worker);

    assert.deepEqual(
      [...new Set(receiver.requests.filter((r) => r.path === "/v1/traces").map((r) => r.encoding))],
      ["protobuf"],
      "every span came as protobuf, Deno's and ours",
    );
    for (
      const [run, status, code, steps] of [
        [cancelled, "cancelled", undefined, ["a", "b", "c"]],
        [orphan, "cancelled", undefined, ["a", "b", "c"]],
        [stalled, "failed", 2, ["a"]],
      ] as const
    ) {
      const spans = endedOf(run.runId);
      const flow = run === stalled ? "otel_stall" : "otel_flow";
      assert.deepEqual(
        spans.map((s) => s.name).sort(),
        [`pgflow.run ${flow}`, ...steps.map((s) => `pgflow.step ${flow}.${s}`)].sort(),
        `each of ${status} run ${run.runId}'s spans once`,
      );
      const runSpan = spans.find((s) => s.name.startsWith("pgflow.run "))!;
      assert.equal(runSpan.traceId, run.traceId, "in the client's trace");
      assert.equal(runSpan.parentSpanId, run.spanId, "the run's span is the client span's child");
      assert.equal(runSpan.spanId, runTrace(run.runId, null).runSpanId);
      assert.equal(runSpan.attributes["pgflow.status"], status);
      assert.equal(runSpan.status?.code, code, `a ${status} run's span status`);
      for (const step of spans.filter((s) => s.name.startsWith("pgflow.step "))) {
        const slug = String(step.attributes["pgflow.step"]);
        assert.equal(step.traceId, run.traceId);
        assert.equal(step.parentSpanId, runSpan.spanId);
        assert.equal(step.spanId, stepSpanId(run.runId, slug));
        assert.equal(step.attributes["pgflow.status"], status);
        assert.ok(BigInt(step.endTimeUnixNano) <= BigInt(runSpan.endTimeUnixNano));
      }
      const [row] = await sql`
        select (extract(epoch from started_at) * 1e6)::bigint::text as started,
               (extract(epoch from coalesce(cancelled_at, failed_at)) * 1e6)::bigint::text as ended
        from pgflow.runs where run_id = ${run.runId}::uuid`;
      assert.deepEqual([runSpan.startTimeUnixNano, runSpan.endTimeUnixNano], [
        `${row.started}000`,
        `${row.ended}000`,
      ], "the run's times are its row's");
    }

    // The cancelled attempt's span (Deno's own encoder, read by the same decoder) hangs under a.
    const attempt = await waitFor(
      () =>
        receiver.spans.find((s) =>
          s.name === "pgflow.task otel_flow.a" && ofRun(cancelled.runId)(s)
        ),
      { what: "the cancelled run's attempt span", timeoutMs: 60_000 },
    );
    assert.equal(attempt.traceId, cancelled.traceId);
    assert.equal(attempt.parentSpanId, stepSpanId(cancelled.runId, "a"));

    const everything = receiver.bodies.join("\n");
    for (const marker of [...MARKERS, CANCEL_MARK]) {
      assert.ok(!everything.includes(marker), `${marker} must not be exported`);
    }
  } finally {
    await killChild(worker);
    await receiver.close();
  }
});
