/**
 * A cancelled run's handlers are told: ctx.signal aborts within about a second, their late reports
 * change nothing, and the worker goes on with other runs. A failed attempt's stack reaches the
 * attempt history.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { runRow, startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

for (const via of ["a direct connection", "PgBouncer in transaction mode"] as const) {
  db.test(`cancel_run over ${via}: a running handler's ctx.signal aborts within about a second; its report is ignored`, async ({ sql, url }) => {
    const bouncer = via === "a direct connection"
      ? undefined
      : await startPgBouncer({ serverPort: Number(new URL(url).port), mode: "transaction" });
    const slug = bouncer === undefined ? "cn_flow" : "cn_pooled";
    let started = 0;
    let abortedAfterMs: number | undefined;
    let cancelledAt = 0;
    const flow = new Flow<{ wait: boolean }>({ slug }).step(
      { slug: "work" },
      async (input, ctx) => {
        started++;
        if (!input.wait) return "quick";
        await new Promise<void>((resolve) =>
          ctx.signal.addEventListener("abort", () => {
            abortedAfterMs = performance.now() - cancelledAt;
            resolve();
          })
        );
        assert.equal(ctx.shutdownSignal.aborted, false, "the worker is not stopping");
        return "finished after the cancel";
      },
    );
    const workers: FlowWorker[] = [];
    try {
      const { worker, logs } = await startWorker(workers, flow, {
        connectionString: bouncer?.via(url) ?? url,
      });
      const run = await startRun(sql, slug, { wait: true });
      await waitFor(() => started === 1, { what: "the handler to start" });
      cancelledAt = performance.now();
      const [result] = await sql`select * from pgflow.cancel_run(${run}, 'operator test')`;
      assert.equal(result.cancelled, true);
      await waitFor(() => abortedAfterMs !== undefined, {
        what: "the handler's signal to abort",
      });
      // The worker checks every second; a busy machine delays a check by seconds, never by the
      // order of magnitude a missing or much slower check would take.
      assert.ok(
        abortedAfterMs! < 15_000,
        `aborted ${Math.round(abortedAfterMs!)} ms after the cancel`,
      );
      const line = await waitFor(() =>
        logs.find((l) => l.event === "run cancelled: its handlers are told to stop")
      );
      assert.deepEqual([line.fields.runId, line.fields.tasks], [run, 1]);
      // Its completion came late: once it is reported, the run and task are still cancelled.
      await waitFor(() => worker.inFlight === 0, { what: "the late report to be made" });
      assert.equal((await runRow(sql, run)).status, "cancelled");
      const [task] = await sql`select status, output from pgflow.step_tasks where run_id = ${run}`;
      assert.deepEqual({ ...task }, { status: "cancelled", output: null });
      // The worker goes on with other runs.
      const next = await startRun(sql, slug, { wait: false });
      assert.equal((await waitForRun(sql, next)).status, "completed");
    } finally {
      await stopAll(workers);
      await bouncer?.destroy();
    }
  });
}

db.test("a failed attempt's stack reaches the attempt history, never the log", async ({ sql, url }) => {
  const flow = new Flow<Record<string, never>>({ slug: "cn_stack", maxAttempts: 1 }).step(
    { slug: "boom" },
    function explode() {
      throw new Error("boom with a stack");
    },
  );
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "cn_stack", {});
    assert.equal((await waitForRun(sql, run)).status, "failed");
    const [attempt] = await sql`select attempt, outcome, error_message, error_stack
                                from pgflow.task_attempts where run_id = ${run}`;
    assert.deepEqual([attempt.attempt, attempt.outcome, attempt.error_message], [
      1,
      "failed",
      "boom with a stack",
    ]);
    assert.match(attempt.error_stack, /^Error: boom with a stack\n\s+at (Object\.)?explode/);
    assert.ok(!JSON.stringify(logs).includes("at explode"), "no stack in the log");
  } finally {
    await stopAll(workers);
  }
});

db.test("ctx.signal also aborts when the worker stops", async ({ sql, url }) => {
  let started = false;
  let reason: unknown;
  const flow = new Flow<Record<string, never>>({ slug: "cn_stop" }).step(
    { slug: "work" },
    async (_input, ctx) => {
      started = true;
      await new Promise<void>((resolve) =>
        ctx.signal.addEventListener("abort", () => {
          reason = ctx.signal.reason;
          resolve();
        })
      );
      return "stopped";
    },
  );
  const workers: FlowWorker[] = [];
  const { worker } = await startWorker(workers, flow, { connectionString: url });
  const run = await startRun(sql, "cn_stop", {});
  await waitFor(() => started, { what: "the handler to start" });
  await worker.stop();
  assert.ok(reason !== undefined, "the handler's signal aborted");
  assert.equal((await waitForRun(sql, run)).status, "completed");
});
