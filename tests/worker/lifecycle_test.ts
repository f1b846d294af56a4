/** Worker lifecycle with real workers: startup verdicts, shutdown order, deprecation drain. */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, WorkerStartupError } from "../../mod.ts";
import { extractFlowOptions, extractFlowShape, extractRoutePlan } from "../../tools.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { queueMessages } from "../support/engine.ts";
import { runRow, startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("a changed definition is a startup error: nothing registered, nothing polled", async ({ sql, url }) => {
  const stored = new Flow<{ id: string }>({ slug: "mm_flow" }).step({ slug: "a" }, (i) => i.id);
  await sql`select pgflow.ensure_flow_compiled('mm_flow',
    ${JSON.stringify(extractFlowShape(stored))}::text::jsonb,
    ${JSON.stringify(extractRoutePlan(stored))}::text::jsonb,
    ${JSON.stringify(extractFlowOptions(stored))}::text::jsonb)`;
  const queued = await startRun(sql, "mm_flow", { id: "x" });
  const changed = new Flow<{ id: string }>({ slug: "mm_flow" })
    .step({ slug: "a" }, (i) => i.id)
    .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
  const workers: FlowWorker[] = [];
  await assert.rejects(
    startWorker(workers, changed, { connectionString: url }),
    (error: unknown) => {
      assert.ok(error instanceof WorkerStartupError);
      assert.ok(error.differences.length > 0, "the differences are listed");
      assert.match(error.message, /mm_flow: /);
      return true;
    },
  );
  assert.equal(workers[0].state, "failed");
  const rows = await sql`select 1 from pgflow.workers where queue_name = 'mm_flow'`;
  assert.equal(rows.length, 0, "no worker row");
  const [message] = await queueMessages(sql, "mm_flow");
  assert.equal(message.read_ct, 0, "queued work stays queued and unread");
  assert.equal((await runRow(sql, queued)).status, "started");
  await stopAll(workers);
});

db.test("stop: polling stops, handlers are signalled, in-flight work reports, then the pool closes", async ({ sql, url }) => {
  let started = false;
  let sawAbort = false;
  const flow = new Flow<{ id: string }>({ slug: "stop_flow" })
    .step({ slug: "long" }, async (_input, ctx) => {
      started = true;
      await new Promise<void>((resolve) =>
        ctx.shutdownSignal.addEventListener("abort", () => resolve())
      );
      sawAbort = true;
      // Still allowed to finish its work and report it after the signal.
      await new Promise((r) => setTimeout(r, 100));
      return "finished after abort";
    });
  const workers: FlowWorker[] = [];
  const { worker, logs } = await startWorker(workers, flow, { connectionString: url });
  const run = await startRun(sql, "stop_flow", { id: "1" });
  await waitFor(() => started, { what: "the handler to start" });
  await worker.stop();
  assert.equal(worker.state, "stopped");
  assert.equal(sawAbort, true);
  assert.deepEqual(await waitForRun(sql, run, 10), {
    status: "completed",
    output: { long: "finished after abort" },
  });
  const events = logs.map((l) => l.event);
  const order = [
    "shutdown: polling stopped",
    "shutdown: signalling handlers",
    "task completed",
    "shutdown: pool closed",
    "shutdown: stopped",
  ].map((event) => events.indexOf(event));
  assert.ok(order.every((i) => i >= 0), `every shutdown event was logged: ${events.join(", ")}`);
  assert.deepEqual(order, [...order].sort((a, b) => a - b), "in that order");
  const [row] =
    await sql`select stopped_at from pgflow.workers where worker_id = ${worker.id}::uuid`;
  assert.ok(row.stopped_at !== null, "the worker row is marked stopped");
  // Nothing polls any more.
  const later = await startRun(sql, "stop_flow", { id: "2" });
  await new Promise((r) => setTimeout(r, 300));
  const message = (await queueMessages(sql, "stop_flow")).at(-1)!;
  assert.equal(message.read_ct, 0);
  assert.equal((await runRow(sql, later)).status, "started");
  await worker.stop(); // idempotent
});

db.test("stop: a handler that ignores the signal is abandoned after shutdownTimeoutMs, and named", async ({ sql, url }) => {
  let started = false;
  let release!: () => void;
  const stuck = new Promise<void>((resolve) => release = resolve);
  const flow = new Flow<{ id: string }>({ slug: "stop_bounded" })
    .step({ slug: "deaf" }, async () => {
      started = true;
      await stuck; // never looks at ctx.shutdownSignal
      return "too late";
    });
  const workers: FlowWorker[] = [];
  const { worker, logs } = await startWorker(workers, flow, {
    connectionString: url,
    shutdownTimeoutMs: 300,
  });
  try {
    const run = await startRun(sql, "stop_bounded", { id: "1" });
    await waitFor(() => started, { what: "the handler to start" });
    // The handler runs until the test releases it, after this: stop() returning is the bound.
    await worker.stop();
    assert.equal(worker.state, "stopped");
    const abandoned = logs.filter((l) => l.event === "shutdown: task abandoned");
    assert.deepEqual(
      abandoned.map((l) => [l.level, l.fields.runId, l.fields.step, l.fields.attempt]),
      [["warn", run, "deaf", 1]],
    );
    const summary = logs.find((l) =>
      l.event === "shutdown: in-flight tasks abandoned, their attempts ended as interrupted"
    );
    assert.equal(summary?.level, "error");
    assert.deepEqual([summary?.fields.timeoutMs, summary?.fields.abandoned], [300, 1]);
    // Queued again at once, the attempt kept as interrupted and not counted.
    const [task] = await sql`
      select status, attempts_count - uncounted_attempts as counted from pgflow.step_tasks
      where run_id = ${run}::uuid`;
    assert.deepEqual([task.status, task.counted], ["queued", 0]);
    const [attempt] =
      await sql`select outcome from pgflow.task_attempts where run_id = ${run}::uuid`;
    assert.equal(attempt.outcome, "interrupted");
  } finally {
    release();
  }
});

db.test("deprecation stops polling and drains in-flight tasks", async ({ sql, url }) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let running = 0;
  const flow = new Flow<{ id: string }>({ slug: "dep_flow" })
    .step({ slug: "work" }, async (_input, ctx) => {
      running++;
      await gate;
      return ctx.shutdownSignal.aborted ? "aborted" : "drained";
    });
  const workers: FlowWorker[] = [];
  try {
    const { worker } = await startWorker(workers, flow, {
      connectionString: url,
      functionName: "dep_fn",
      heartbeatIntervalMs: 100,
    });
    const first = await startRun(sql, "dep_flow", { id: "1" });
    await waitFor(() => running === 1, { what: "the first task to start" });
    await sql`select pgflow.deprecate_workers('dep_fn')`;
    await waitFor(() => worker.state === "draining", { what: "the worker to drain" });
    // The row is marked stopped once the poll loop has ended (a read already under way included);
    // from then on nothing may read.
    await waitFor(
      async () =>
        (await sql`select 1 from pgflow.workers
                   where worker_id = ${worker.id}::uuid and stopped_at is not null`).length > 0,
      { what: "the draining worker's polling to end", timeoutMs: 60_000 },
    );
    const second = await startRun(sql, "dep_flow", { id: "2" });
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(running, 1, "no new task started while draining");
    release();
    await worker.done;
    assert.equal(worker.state, "stopped");
    assert.deepEqual(await waitForRun(sql, first, 10), {
      status: "completed",
      output: { work: "drained" },
    });
    assert.equal((await runRow(sql, second)).status, "started");
    const messages = await queueMessages(sql, "dep_flow");
    assert.deepEqual(messages.map((m) => m.read_ct), [0]);
  } finally {
    release();
    await stopAll(workers);
  }
});
