/**
 * Deno's own OpenTelemetry export (`OTEL_DENO=true`, OTLP over HTTP/JSON) pointed at a receiver of
 * the test's: a run started inside a client's span, a worker process running its three steps (one
 * failure, then a retry). One trace: the run's span a child of the client's, each step's span a
 * child of the run's, each attempt's span (both of b's tries) a child of its step's, the handler's
 * own span a child of its attempt's; the identity of each as attributes, and no input, output or
 * error text anywhere in what was exported. A child run started with a traceparent naming a step's
 * span hangs under that step.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { killChild } from "../e2e/process.ts";
import { runTracedClient, startTracedWorker, stopTracedWorker } from "./children.ts";
import { type ReceivedSpan, startReceiver } from "./otlp_receiver.ts";
import { MARKERS } from "./fixtures/traced_flow.ts";
import { runTrace, stepSpanId, stepTraceparent } from "../../src/telemetry/span_ids.ts";

const db = testDatabase(import.meta.url);

db.test("a traced run's attempts export to Deno's OTLP exporter in one trace", async ({ sql, url }) => {
  const receiver = startReceiver();
  const otel = {
    DATABASE_URL: url,
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  };
  // Deno observes gauges at its periodic export, not at the flush on exit: export often.
  const worker = startTracedWorker({
    ...otel,
    OTEL_SERVICE_NAME: "worker",
    OTEL_METRIC_EXPORT_INTERVAL: "500",
  });
  try {
    await waitFor(
      () =>
        sql`select 1 from pgflow.workers where queue_name = 'otel_flow'`.then((r) => r.length > 0),
      { what: `the worker to register; output:\n${worker.output()}`, timeoutMs: 120_000 },
    );
    const { runId, traceId, spanId: clientSpanId } = await runTracedClient({
      ...otel,
      OTEL_SERVICE_NAME: "client",
    });

    const [run] = await sql`select traceparent from pgflow.runs where run_id = ${runId}::uuid`;
    assert.equal(run.traceparent, `00-${traceId}-${clientSpanId}-01`);
    await waitFor(
      () =>
        sql`select 1 from pgflow.runs where run_id = ${runId}::uuid and status = 'completed'`
          .then((r) => r.length > 0),
      { what: `the run to complete; worker output:\n${worker.output()}`, timeoutMs: 120_000 },
    );
    // A child run, as a step of the parent would start it: its traceparent names the step's span.
    const [child] = await sql`
      select run_id from pgflow.start_flow('otel_flow', '{"secret": "child"}'::jsonb,
        traceparent => ${stepTraceparent(runId, "b", run.traceparent)})`;
    await waitFor(
      () =>
        sql`select 1 from pgflow.runs where run_id = ${child.run_id}::uuid and status = 'completed'`
          .then((r) => r.length > 0),
      { what: `the child run to complete; worker output:\n${worker.output()}`, timeoutMs: 120_000 },
    );
    // A stop flushes the worker's exporter.
    await stopTracedWorker(worker);
    const ofRun = (id: string) => (s: ReceivedSpan) => s.attributes["pgflow.run_id"] === id;
    const attempts = await waitFor(() => {
      const found = receiver.spans.filter((s) => s.name.startsWith("pgflow.task "))
        .filter(ofRun(runId));
      return found.length >= 4 && found;
    }, { what: "the attempts' spans", timeoutMs: 60_000 });
    const ended = await waitFor(() => {
      const found = receiver.spans.filter((s) => /^pgflow\.(run|step) /.test(s.name));
      return found.length >= 8 && found;
    }, { what: `the run and step spans; worker output:\n${worker.output()}`, timeoutMs: 60_000 });

    // The run's span: a child of the client's, its id the one every worker derives.
    const ids = runTrace(runId, run.traceparent);
    const runSpans = ended.filter((s) => s.name === "pgflow.run otel_flow" && ofRun(runId)(s));
    assert.equal(runSpans.length, 1, "one span for the run");
    const [runSpan] = runSpans;
    assert.equal(runSpan.traceId, traceId);
    assert.equal(runSpan.spanId, ids.runSpanId);
    assert.equal(runSpan.parentSpanId, clientSpanId, "the run's span is a child of the client's");
    assert.equal(runSpan.attributes["pgflow.status"], "completed");
    assert.equal(runSpan.attributes["pgflow.flow"], "otel_flow");
    assert.equal(runSpan.status?.code, 1, "a completed run's status is OK");
    const [times] = await sql`
      select (extract(epoch from started_at) * 1e6)::bigint::text as started,
             (extract(epoch from completed_at) * 1e6)::bigint::text as ended
      from pgflow.runs where run_id = ${runId}::uuid`;
    assert.equal(runSpan.startTimeUnixNano, `${times.started}000`, "the run's start, from its row");

    // One span per step, each a child of the run's; each attempt a child of its step's.
    const steps = ended.filter((s) => s.name.startsWith("pgflow.step ") && ofRun(runId)(s));
    assert.deepEqual(steps.map((s) => s.name).sort(), [
      "pgflow.step otel_flow.a",
      "pgflow.step otel_flow.b",
      "pgflow.step otel_flow.c",
    ]);
    for (const step of steps) {
      const slug = String(step.attributes["pgflow.step"]);
      assert.equal(step.traceId, traceId);
      assert.equal(step.parentSpanId, runSpan.spanId, `step ${slug} is a child of the run's span`);
      assert.equal(step.spanId, stepSpanId(runId, slug));
      assert.equal(step.attributes["pgflow.status"], "completed");
      assert.equal(step.attributes["pgflow.tasks"], 1);
      assert.ok(BigInt(step.startTimeUnixNano) >= BigInt(runSpan.startTimeUnixNano));
      assert.ok(BigInt(step.endTimeUnixNano) <= BigInt(runSpan.endTimeUnixNano));
      for (const attempt of attempts.filter((a) => a.attributes["pgflow.step"] === slug)) {
        assert.equal(attempt.parentSpanId, step.spanId, `${slug}'s attempts are its children`);
      }
    }
    assert.equal(
      attempts.filter((a) => a.parentSpanId === stepSpanId(runId, "b")).length,
      2,
      "the retry is a second attempt under the same step span",
    );

    // The child run's span hangs under the parent's step b, in the parent's trace.
    const childRun = ended.find((s) => s.name === "pgflow.run otel_flow" && ofRun(child.run_id)(s));
    assert.ok(childRun, "the child run's span was exported");
    assert.equal(childRun.traceId, traceId);
    assert.equal(childRun.parentSpanId, stepSpanId(runId, "b"));

    const client_span = receiver.spans.find((s) => s.name === "POST /orders");
    assert.ok(client_span, "the client's span was exported");
    const byStep = (step: string) => attempts.filter((s) => s.attributes["pgflow.step"] === step);
    assert.deepEqual(attempts.map((s) => s.attributes["pgflow.step"]).sort(), ["a", "b", "b", "c"]);
    for (const span of attempts) {
      assert.equal(span.traceId, traceId, `${span.name} is in the client's trace`);
      assert.equal(span.attributes["pgflow.run_id"], runId);
      assert.equal(span.attributes["pgflow.flow"], "otel_flow");
      assert.equal(span.attributes["messaging.destination.name"], "otel_flow");
      assert.match(String(span.attributes["pgflow.worker_id"]), /^[0-9a-f-]{36}$/);
    }
    const outcome = (
      s: ReceivedSpan,
    ) => [s.attributes["pgflow.attempt"], s.attributes["pgflow.outcome"]];
    assert.deepEqual(byStep("b").map(outcome).sort(), [[1, "retried"], [2, "completed"]]);
    assert.deepEqual(byStep("a").map(outcome), [[1, "completed"]]);
    assert.deepEqual(byStep("c").map(outcome), [[1, "completed"]]);
    const failedAttempt = byStep("b").find((s) => s.attributes["pgflow.attempt"] === 1)!;
    assert.equal(failedAttempt.status?.code, 2, "the failed attempt's status is ERROR");

    // The handler's own spans are children of their attempt's (the child run's did work too).
    const handler = receiver.spans.filter((s) =>
      s.name === "handler work" && byStep("b").some((b) => b.spanId === s.parentSpanId)
    );
    assert.equal(handler.length, 2, "one handler span under each of b's attempts");
    for (const span of handler) assert.equal(span.traceId, traceId);

    const names = new Set(receiver.metrics.map((m) => m.name));
    for (
      const name of [
        "pgflow.tasks.started",
        "pgflow.tasks.completed",
        "pgflow.tasks.failed",
        "pgflow.task.duration",
        "pgflow.task.pickup_latency",
        "pgflow.queue.depth",
        "pgflow.queue.oldest_age",
        "pgflow.tasks.waiting",
      ]
    ) assert.ok(names.has(name), `metric ${name} was exported (got ${[...names].join(", ")})`);

    const depth = receiver.metrics.find((m) => m.name === "pgflow.queue.depth")!;
    assert.ok(
      depth.points.some((p) =>
        (p.attributes as Record<string, unknown>)["messaging.destination.name"] === "otel_flow"
      ),
      "the worker's queue is sampled",
    );
    const everything = receiver.bodies.join("\n");
    for (const marker of MARKERS) {
      assert.ok(!everything.includes(marker), `${marker} must not be exported`);
    }
  } finally {
    await killChild(worker);
    await receiver.close();
  }
});
