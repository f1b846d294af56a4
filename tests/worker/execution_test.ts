/** Handler execution with real workers: exact outputs, retries, context, and free-slot refill. */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { makeVisible } from "../support/engine.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("falsy outputs are stored exactly; undefined becomes JSON null", async ({ sql, url }) => {
  const flow = new Flow<{ id: string }>({ slug: "falsy" })
    .step({ slug: "zero" }, () => 0)
    .step({ slug: "no" }, () => false)
    .step({ slug: "empty" }, () => "")
    .step({ slug: "nothing" }, () => null)
    // The DSL rejects `void` outputs at compile time; a JS handler may still return nothing.
    .step({ slug: "void" }, (() => {}) as unknown as () => null);
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "falsy", { id: "x" });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    const rows = await sql<{ step_slug: string; output: string }[]>`
      select step_slug, output::text from pgflow.step_states where run_id = ${run}::uuid
      order by step_slug`;
    assert.deepEqual(Object.fromEntries(rows.map((r) => [r.step_slug, r.output])), {
      empty: '""',
      no: "false",
      nothing: "null",
      void: "null",
      zero: "0",
    });
  } finally {
    await stopAll(workers);
  }
});

db.test("a thrown error fails the attempt with its message; SQL retries it", async ({ sql, url }) => {
  let calls = 0;
  const flow = new Flow<{ id: string }>({ slug: "flaky", maxAttempts: 3, baseDelay: 1 })
    .step({ slug: "call" }, (_input, ctx) => {
      calls++;
      if (calls < 3) {
        throw new Error(`upstream said no (attempt ${ctx.stepTask.task_index}/${calls})`);
      }
      return { ok: calls };
    });
  const always = new Flow<{ id: string }>({ slug: "broken", maxAttempts: 2, baseDelay: 1 })
    .step({ slug: "call" }, () => {
      throw "plain string failure";
    });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, [
      routeFlow(flow, { queues: { call: "retry_queue" } }),
      routeFlow(always, { queues: { call: "retry_queue" } }),
    ], { queueName: "retry_queue", connectionString: url });
    const ok = await startRun(sql, "flaky", { id: "a" });
    const bad = await startRun(sql, "broken", { id: "b" });
    // Skip the retry delays: make the retried messages visible at once.
    await waitFor(async () => {
      await makeVisible(sql, "retry_queue");
      const [a, b] = [await statusOf(ok), await statusOf(bad)];
      return a !== "started" && b !== "started";
    }, { what: "both runs to finish" });
    assert.equal(await statusOf(ok), "completed");
    assert.equal(calls, 3);
    const [okTask] = await sql`
      select attempts_count, error_message, output from pgflow.step_tasks where run_id = ${ok}::uuid`;
    assert.equal(okTask.attempts_count, 3);
    assert.deepEqual(okTask.output, { ok: 3 });
    assert.equal(await statusOf(bad), "failed");
    const [badTask] = await sql`
      select attempts_count, error_message from pgflow.step_tasks where run_id = ${bad}::uuid`;
    assert.deepEqual({ ...badTask }, { attempts_count: 2, error_message: "plain string failure" });
  } finally {
    await stopAll(workers);
  }

  async function statusOf(run: string): Promise<string> {
    const [row] = await sql`select status from pgflow.runs where run_id = ${run}::uuid`;
    return row.status;
  }
});

db.test("handlers get env, stepTask, rawMessage, sql, flowInput and a clear supabase error", async ({ sql, url }) => {
  const seen: Record<string, unknown> = {};
  const flow = new Flow<{ city: string }>({ slug: "ctx_flow" })
    .step({ slug: "root" }, (input) => input.city.length)
    .step({ slug: "leaf", dependsOn: ["root"] }, async (deps, ctx) => {
      seen.input = deps;
      seen.flowInput = await ctx.flowInput;
      seen.env = ctx.env.GREETING;
      seen.stepTask = { ...ctx.stepTask };
      seen.rawMessageId = ctx.rawMessage.msg_id;
      seen.rawBody = ctx.rawMessage.message;
      seen.one = (await ctx.sql`select 1 as one`)[0].one;
      try {
        ctx.supabase;
      } catch (error) {
        seen.supabase = (error as Error).message;
      }
      seen.aborted = ctx.shutdownSignal.aborted;
      return "done";
    });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url, env: { GREETING: "hi" } });
    const run = await startRun(sql, "ctx_flow", { city: "Oslo" });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    const [task] = await sql<{ message_id: string }[]>`
      select message_id::text from pgflow.step_tasks where run_id = ${run}::uuid and step_slug = 'leaf'`;
    assert.deepEqual(seen.input, { root: 4 });
    assert.deepEqual(seen.flowInput, { city: "Oslo" });
    assert.equal(seen.env, "hi");
    assert.deepEqual(seen.stepTask, {
      flow_slug: "ctx_flow",
      run_id: run,
      step_slug: "leaf",
      task_index: 0,
      queue_name: "ctx_flow",
      msg_id: task.message_id,
      input: { root: 4 },
    });
    assert.equal(seen.rawMessageId, task.message_id);
    assert.equal(typeof seen.rawBody, "object");
    assert.equal(seen.one, 1);
    assert.match(String(seen.supabase), /SUPABASE_URL/);
    assert.equal(seen.aborted, false);
  } finally {
    await stopAll(workers);
  }
});

db.test("a slow task does not block polling; maxConcurrent bounds work in flight", async ({ sql, url }) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let running = 0;
  let peak = 0;
  const flow = new Flow<{ slow: boolean }>({ slug: "slots_flow" })
    .step({ slug: "work" }, async (input) => {
      running++;
      peak = Math.max(peak, running);
      try {
        if (input.slow) await gate;
        else await new Promise((r) => setTimeout(r, 20));
        return input.slow;
      } finally {
        running--;
      }
    });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url, maxConcurrent: 3, batchSize: 3 });
    const slow = await startRun(sql, "slots_flow", { slow: true });
    await waitFor(() => running === 1, { what: "the slow task to start" });
    const fast: string[] = [];
    for (let i = 0; i < 12; i++) fast.push(await startRun(sql, "slots_flow", { slow: false }));
    for (const run of fast) assert.equal((await waitForRun(sql, run)).status, "completed");
    // Every fast run finished while the slow one still held its slot.
    assert.equal(
      (await sql`select status from pgflow.runs where run_id = ${slow}::uuid`)[0].status,
      "started",
    );
    assert.ok(peak <= 3, `at most 3 in flight, saw ${peak}`);
    assert.equal(peak, 3, "the free slots were used");
    release();
    assert.equal((await waitForRun(sql, slow)).status, "completed");
  } finally {
    release();
    await stopAll(workers);
  }
});
