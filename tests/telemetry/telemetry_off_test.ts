/**
 * With no exporter (no `OTEL_DENO`), a worker writes nothing for run and step spans: no claim
 * after its reports and no sweep on its timers, so `pgflow.emitted_spans` and `pgflow.span_sweep`
 * stay empty however its runs end (completed by a report, cancelled from SQL).
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { tracingEnabled } from "../../src/telemetry/attempts.ts";

const db = testDatabase(import.meta.url);

db.test("a worker without an exporter neither claims nor sweeps spans", async ({ sql, url }) => {
  assert.equal(tracingEnabled(), false, "this test runs without OTEL_DENO");
  const flow = new Flow<{ n: number }>({ slug: "off_flow" })
    .step({ slug: "a" }, (input) => input.n + 1)
    .step({ slug: "b", dependsOn: ["a"] }, (deps) => deps.a + 1);
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url });
    const done = await startRun(sql, "off_flow", { n: 1 });
    assert.equal((await waitForRun(sql, done)).status, "completed");
    // The flow's definition exists now: a run with no worker's report, cancelled from SQL.
    const cancelled = await startRun(sql, "off_flow", { n: 2 });
    await sql`select pgflow.cancel_run(${cancelled}::uuid)`;
  } finally {
    // A stop waits for the timers' last calls: a sweep started at the worker's start has ended.
    await stopAll(workers);
  }
  const [counts] = await sql`
    select (select count(*)::int from pgflow.emitted_spans) as emitted,
           (select count(*)::int from pgflow.span_sweep) as sweeps`;
  assert.deepEqual({ ...counts }, { emitted: 0, sweeps: 0 });
});
