/**
 * Deno's own OpenTelemetry export (`OTEL_DENO=true`, OTLP over HTTP/JSON) pointed at a receiver of
 * the test's: a run started inside a client's span, a worker process running its three steps (one
 * failure, then a retry); every attempt's span is in the client's trace, a child of its span, with
 * the task's identity as attributes, the handler's own span a child of its attempt's, and no input,
 * output or error text anywhere in what was exported.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { killChild, spawnDeno } from "../e2e/process.ts";
import { type ReceivedSpan, startReceiver } from "./otlp_receiver.ts";
import { MARKERS } from "./fixtures/traced_flow.ts";

const db = testDatabase(import.meta.url);
const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname;

db.test("a traced run's attempts export to Deno's OTLP exporter in one trace", async ({ sql, url }) => {
  const receiver = startReceiver();
  const otel = {
    DATABASE_URL: url,
    OTEL_DENO: "true",
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.endpoint,
    OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
  };
  // Deno observes gauges at its periodic export, not at the flush on exit: export often.
  const worker = spawnDeno(fixture("traced_worker.ts"), {
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
    const client = spawnDeno(fixture("traced_client.ts"), { ...otel, OTEL_SERVICE_NAME: "client" });
    await client.process.status;
    const [runId, traceId, clientSpanId] = client.output().trim().split(/\s+/).slice(-3);
    assert.match(traceId, /^[0-9a-f]{32}$/, client.output());

    const [run] = await sql`select traceparent from pgflow.runs where run_id = ${runId}::uuid`;
    assert.equal(run.traceparent, `00-${traceId}-${clientSpanId}-01`);
    await waitFor(
      () =>
        sql`select 1 from pgflow.runs where run_id = ${runId}::uuid and status = 'completed'`
          .then((r) => r.length > 0),
      { what: `the run to complete; worker output:\n${worker.output()}`, timeoutMs: 120_000 },
    );
    // A stop flushes the worker's exporter.
    await killChild(worker, "SIGTERM");
    const attempts = await waitFor(() => {
      const found = receiver.spans.filter((s) => s.name.startsWith("pgflow.task "));
      return found.length >= 4 && found;
    }, { what: "the attempts' spans", timeoutMs: 60_000 });

    const client_span = receiver.spans.find((s) => s.name === "POST /orders");
    assert.ok(client_span, "the client's span was exported");
    const byStep = (step: string) => attempts.filter((s) => s.attributes["pgflow.step"] === step);
    assert.deepEqual(attempts.map((s) => s.attributes["pgflow.step"]).sort(), ["a", "b", "b", "c"]);
    for (const span of attempts) {
      assert.equal(span.traceId, traceId, `${span.name} is in the client's trace`);
      assert.equal(span.parentSpanId, clientSpanId, `${span.name} is a child of the client's span`);
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

    // The handler's own spans are children of their attempt's.
    const handler = receiver.spans.filter((s) => s.name === "handler work");
    assert.equal(handler.length, 2);
    for (const span of handler) {
      assert.ok(byStep("b").some((b) => b.spanId === span.parentSpanId), "child of a b attempt");
      assert.equal(span.traceId, traceId);
    }

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
