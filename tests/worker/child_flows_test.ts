/**
 * Child flows end to end: a parent maps 200 children of a flow on a shared queue that several
 * workers serve (their completions race for the one parent map), is cancelled midway, and is
 * resumed after forced child failures, starting only the failed children again.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const QUEUE = "accounts";

function onQueue<F extends { stepOrder: readonly string[] }>(flow: F) {
  const queues = Object.fromEntries(flow.stepOrder.map((s) => [s, QUEUE]));
  return routeFlow(flow as never, { queues } as never) as never;
}

/** A parent flow: an array of numbers, one child run per number, then their sum. */
// deno-lint-ignore no-explicit-any
function parentOf(slug: string, child: Flow<{ n: number }, any, any, any, any>) {
  return new Flow<{ count: number }>({ slug })
    .array({ slug: "items" }, (input) => Array.from({ length: input.count }, (_, i) => i))
    .subflowMap({ slug: "each", array: "items", flow: child, input: (n) => ({ n }) })
    .step({ slug: "sum", dependsOn: ["each"] }, (deps) => deps.each.length);
}

async function children(sql: postgres.Sql, parent: string) {
  return await sql<{ run_id: string; status: string; parent_task_index: number }[]>`
    select run_id, status, parent_task_index from pgflow.runs
    where parent_run_id = ${parent}::uuid order by parent_task_index`;
}

async function startWorkers(
  workers: FlowWorker[],
  flows: readonly never[],
  url: string,
  count: number,
): Promise<void> {
  for (let i = 0; i < count; i++) {
    await startWorker(workers, flows as never, {
      queueName: QUEUE,
      connectionString: url,
      maxConcurrent: 10,
    });
  }
}

db.test("a map of 200 child runs on a shared queue served by 4 workers completes", async ({ sql, url }) => {
  const child = new Flow<{ n: number }>({ slug: "double_v1" })
    .step({ slug: "twice" }, (input) => input.n * 2);
  const parent = parentOf("fan_out_v1", child);
  const workers: FlowWorker[] = [];
  try {
    await startWorkers(workers, [onQueue(child), onQueue(parent)], url, 4);
    const run = await startRun(sql, "fan_out_v1", { count: 200 });
    assert.deepEqual(await waitForRun(sql, run, 120_000), {
      status: "completed",
      output: { sum: 200 },
    });
    const kids = await children(sql, run);
    assert.equal(kids.length, 200);
    assert.deepEqual(
      kids.map((k) => k.parent_task_index),
      Array.from({ length: 200 }, (_, i) => i),
    );
    assert.ok(kids.every((k) => k.status === "completed"));
    const [each] = await sql`select output, remaining_tasks from pgflow.step_states
                             where run_id = ${run}::uuid and step_slug = 'each'`;
    assert.equal(each.remaining_tasks, 0);
    assert.deepEqual(each.output, Array.from({ length: 200 }, (_, i) => ({ twice: i * 2 })));
    // The waiting step never had a message: its tasks name their children instead.
    const [{ with_message }] = await sql`select count(*)::int as with_message from pgflow.step_tasks
      where run_id = ${run}::uuid and step_slug = 'each' and message_id is not null`;
    assert.equal(with_message, 0);
  } finally {
    await stopAll(workers);
  }
});

db.test("cancelling a parent midway leaves no child running", async ({ sql, url }) => {
  // Children from 40 on wait until they are told to stop (their run's cancellation aborts them).
  const child = new Flow<{ n: number }>({ slug: "slow_v1" })
    .step({ slug: "work" }, async (input, ctx) => {
      if (input.n >= 40) {
        await new Promise((resolve) =>
          ctx.signal.addEventListener("abort", resolve, { once: true })
        );
      }
      return input.n;
    });
  const parent = parentOf("fan_out_slow_v1", child);
  const workers: FlowWorker[] = [];
  try {
    await startWorkers(workers, [onQueue(child), onQueue(parent)], url, 2);
    const run = await startRun(sql, "fan_out_slow_v1", { count: 200 });
    await waitFor(
      async () => (await children(sql, run)).filter((k) => k.status === "completed").length >= 20,
      {
        timeoutMs: 60_000,
      },
    );
    await sql`select pgflow.cancel_run(${run}::uuid, 'midway')`;
    const kids = await children(sql, run);
    assert.equal(kids.length, 200);
    assert.deepEqual(kids.filter((k) => k.status === "started"), [], "no child left running");
    assert.ok(kids.filter((k) => k.status === "cancelled").length >= 160);
    // Nothing of theirs is left to claim: every unfinished child task's message is archived.
    const [{ open }] = await sql`select count(*)::int as open from pgflow.step_tasks t
      join pgflow.runs r on r.run_id = t.run_id
      where r.parent_run_id = ${run}::uuid and t.status in ('queued', 'started')`;
    assert.equal(open, 0);
  } finally {
    await stopAll(workers);
  }
});

db.test("a parent resumed after 3 forced child failures starts only 3 new children", async ({ sql, url }) => {
  let failing = true;
  const child = new Flow<{ n: number }>({ slug: "flaky_v1", maxAttempts: 1 })
    .step({ slug: "work" }, (input) => {
      if (failing && [13, 57, 88].includes(input.n)) throw new Error(`forced failure ${input.n}`);
      return input.n;
    });
  const parent = parentOf("fan_out_flaky_v1", child);
  const workers: FlowWorker[] = [];
  try {
    await startWorkers(workers, [onQueue(child), onQueue(parent)], url, 2);
    const run = await startRun(sql, "fan_out_flaky_v1", { count: 100 });
    assert.equal((await waitForRun(sql, run, 120_000)).status, "failed");
    // The parent failed at the first failure; its other children ran on to the end.
    await waitFor(async () => (await children(sql, run)).every((k) => k.status !== "started"), {
      timeoutMs: 60_000,
    });
    const first = await children(sql, run);
    assert.deepEqual(
      first.filter((k) => k.status === "failed").map((k) => k.parent_task_index),
      [13, 57, 88],
    );
    failing = false;
    const [resumed] = await sql`select run_id from pgflow.resume_run(${run}::uuid)`;
    assert.deepEqual(await waitForRun(sql, resumed.run_id, 120_000), {
      status: "completed",
      output: { sum: 100 },
    });
    const fresh = await children(sql, resumed.run_id);
    assert.deepEqual(fresh.map((k) => k.parent_task_index), [13, 57, 88], "only 3 new children");
    const [{ total }] =
      await sql`select count(*)::int as total from pgflow.runs where flow_slug = 'flaky_v1'`;
    assert.equal(total, 103);
  } finally {
    await stopAll(workers);
  }
});
