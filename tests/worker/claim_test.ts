/**
 * The read-once poll and the exact-support claim with real workers: mixed batches, huge message
 * ids, and two workers racing on one queue.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import {
  type CompilableFlow,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "../../tools.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { queueMessages } from "../support/engine.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";
import type postgres from "postgres";

const db = testDatabase(import.meta.url);

async function compile(sql: postgres.Sql, definition: CompilableFlow): Promise<void> {
  await sql`select pgflow.ensure_flow_compiled(${definition.slug},
    ${JSON.stringify(extractFlowShape(definition))}::text::jsonb,
    ${JSON.stringify(extractRoutePlan(definition))}::text::jsonb,
    ${JSON.stringify(extractFlowOptions(definition))}::text::jsonb)`;
}

db.test("a mixed batch: valid work completes, unknown and unsupported stay untouched", async ({ sql, url }) => {
  const served = new Flow<{ n: number }>({ slug: "mixed_served" })
    .step({ slug: "double" }, (input) => input.n * 2);
  const foreign = new Flow<{ n: number }>({ slug: "mixed_other" })
    .step({ slug: "triple" }, (input) => input.n * 3);
  await compile(sql, routeFlow(foreign, { queues: { triple: "mixed_queue" } }));
  const otherRun = await startRun(sql, "mixed_other", { n: 1 });
  const [{ send: unknownId }] = await sql<{ send: string }[]>`
    select pgmq.send('mixed_queue', '{"flow_slug": "mixed_served", "step_slug": "double"}'::jsonb)::text as send`;
  const [unsupported] = await sql<{ message_id: string }[]>`
    select message_id::text from pgflow.step_tasks where run_id = ${otherRun}::uuid`;
  const before = await queueMessages(sql, "mixed_queue");

  const workers: FlowWorker[] = [];
  try {
    // The served flow's queue is created by its compile, after the others were sent: start the
    // worker first, then a run, so one read sees all three messages.
    const { worker, logs } = await startWorker(
      workers,
      [routeFlow(served, { queues: { double: "mixed_queue" } })],
      {
        queueName: "mixed_queue",
        connectionString: url,
        visibilityTimeout: 30,
        batchSize: 10,
        logSummaryIntervalMs: 200,
      },
    );
    const run = await startRun(sql, "mixed_served", { n: 21 });
    assert.deepEqual(await waitForRun(sql, run), { status: "completed", output: { double: 42 } });
    await waitFor(() => logs.filter((l) => l.level === "warn").length >= 2, {
      what: "two warnings",
    });
    assert.equal(worker.state, "running");

    // One report per disposition (and flow, step): the unsupported one names the task's flow and
    // step, the unknown one nothing but the message.
    const warnings = logs.filter((l) => l.level === "warn");
    assert.deepEqual(
      warnings.map((w) => [
        w.fields.exampleMessageId,
        w.fields.disposition,
        w.fields.flow,
        w.fields.step,
        w.fields.count,
      ]).sort(),
      [
        [unknownId, "unknown", undefined, undefined, 1],
        [unsupported.message_id, "unsupported", "mixed_other", "triple", 1],
      ].sort(),
    );
    for (const warning of warnings) {
      assert.equal(warning.fields.queue, "mixed_queue");
      // Identity only: nothing taken from the message's body.
      assert.equal(JSON.stringify(warning).includes("mixed_served"), false);
    }

    // The others were only read: same bodies, still in the queue, read once, task still queued.
    const after = await queueMessages(sql, "mixed_queue");
    for (const id of [unknownId, unsupported.message_id]) {
      const b = before.find((m) => m.msg_id === id)!;
      const a = after.find((m) => m.msg_id === id)!;
      assert.ok(a, `message ${id} is still in the queue`);
      assert.deepEqual(a.message, b.message);
      assert.equal(a.read_ct, b.read_ct + 1);
    }
    const [task] = await sql`
      select status, attempts_count, last_worker_id from pgflow.step_tasks where run_id = ${otherRun}::uuid`;
    assert.deepEqual({ ...task }, { status: "queued", attempts_count: 0, last_worker_id: null });
    const archived = await sql`select msg_id from pgmq.a_mixed_queue`;
    assert.equal(archived.length, 1, "only the served task's message was archived");
  } finally {
    await stopAll(workers);
  }
});

db.test("message ids above 2^53 stay exact end to end", async ({ sql, url }) => {
  const seen: { raw: string; task: string }[] = [];
  const flow = new Flow<{ n: number }>({ slug: "big_ids" })
    .step({ slug: "a" }, (input, ctx) => {
      seen.push({ raw: ctx.rawMessage.msg_id, task: ctx.stepTask.msg_id });
      return input.n + 1;
    })
    .step({ slug: "b", dependsOn: ["a"] }, (deps, ctx) => {
      seen.push({ raw: ctx.rawMessage.msg_id, task: ctx.stepTask.msg_id });
      return deps.a + 1;
    });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url });
    // 2^53 + 1 is the first integer a JS number cannot hold.
    await sql`select setval('pgmq.q_big_ids_msg_id_seq', 9007199254740992)`;
    const run = await startRun(sql, "big_ids", { n: 1 });
    assert.deepEqual(await waitForRun(sql, run), { status: "completed", output: { b: 3 } });
    const tasks = await sql<{ message_id: string; step_slug: string }[]>`
      select message_id::text, step_slug from pgflow.step_tasks where run_id = ${run}::uuid
      order by step_slug`;
    assert.deepEqual(tasks.map((t) => t.message_id), ["9007199254740993", "9007199254740994"]);
    assert.deepEqual(seen, [
      { raw: "9007199254740993", task: "9007199254740993" },
      { raw: "9007199254740994", task: "9007199254740994" },
    ]);
    const archived = await sql<{ msg_id: string }[]>`
      select msg_id::text from pgmq.a_big_ids order by msg_id`;
    assert.deepEqual(archived.map((m) => m.msg_id), ["9007199254740993", "9007199254740994"]);
  } finally {
    await stopAll(workers);
  }
});

db.test("two workers on one queue never run one attempt twice", async ({ sql, url }) => {
  const runs = new Map<string, number>();
  const byWorker = new Map<string, number>();
  const flow = new Flow<number[], { workerTag: string }>({ slug: "race_flow" })
    .map({ slug: "square" }, async (n, ctx) => {
      const key = `${ctx.stepTask.run_id}/${ctx.stepTask.task_index}`;
      runs.set(key, (runs.get(key) ?? 0) + 1);
      byWorker.set(String(ctx.workerTag), (byWorker.get(String(ctx.workerTag)) ?? 0) + 1);
      await new Promise((r) => setTimeout(r, Math.random() * 10));
      return n * n;
    });
  const routed = routeFlow(flow, { queues: { square: "race_queue" } });
  const workers: FlowWorker[] = [];
  try {
    for (const tag of ["a", "b"]) {
      await startWorker(workers, [routed], {
        queueName: "race_queue",
        connectionString: url,
        batchSize: 4,
        maxConcurrent: 4,
        visibilityTimeout: 1,
        context: { workerTag: tag },
      });
    }
    const ids: string[] = [];
    for (let i = 0; i < 10; i++) {
      ids.push(await startRun(sql, "race_flow", Array.from({ length: 10 }, (_, k) => k)));
    }
    for (const id of ids) {
      assert.equal((await waitForRun(sql, id)).status, "completed");
    }
    assert.equal(runs.size, 100);
    assert.deepEqual([...new Set(runs.values())], [1], "every task ran exactly once");
    const [attempts] = await sql`
      select count(*)::int as n, max(attempts_count) as max from pgflow.step_tasks
      where flow_slug = 'race_flow'`;
    assert.deepEqual({ ...attempts }, { n: 100, max: 1 });
    console.log(`tasks per worker: ${JSON.stringify(Object.fromEntries(byWorker))}`);
  } finally {
    await stopAll(workers);
  }
});
