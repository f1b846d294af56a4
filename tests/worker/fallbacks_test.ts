/**
 * The fallbacks, each through real behaviour against real Postgres: the completer sends a failed
 * batch again one completion per call, the poll loop claims with its explicit pairs once its worker row
 * is gone (recognised by SQLSTATE PFW01), the run-input cache forgets the least recently used run
 * first, and fail_task is given the attempt that ran.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { Flow, type FlowWorker } from "../../mod.ts";
import type { ClaimedTask } from "../../src/task/claim.ts";
import { Completer } from "../../src/task/completer.ts";
import { failTask } from "../../src/task/report.ts";
import { FlowInputCache } from "../../src/task/flow_input.ts";
import { createLogger, type LogRecord } from "../../src/platform/logger.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { type ClaimRow, defineFlow, makeVisible, readAndStart } from "../support/engine.ts";
import { runRow, startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

function claimedTask(row: ClaimRow): ClaimedTask {
  assert.equal(row.disposition, "claimed");
  return {
    messageId: String(row.message_id),
    flowSlug: row.flow_slug!,
    runId: row.run_id!,
    stepSlug: row.step_slug!,
    taskIndex: row.task_index!,
    input: row.input as ClaimedTask["input"],
    attempt: row.attempt!,
  };
}

/** Starts `runs` runs of a one-step flow and claims their tasks as `worker`. */
async function claimRuns(
  sql: postgres.Sql,
  flow: string,
  runs: number,
  options: { maxAttempts?: number } = {},
): Promise<{ worker: string; tasks: ClaimedTask[] }> {
  await defineFlow(sql, flow, [{ slug: "a" }], { maxAttempts: options.maxAttempts ?? 3 });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, ${flow}, 'test_fn')`;
  for (let i = 0; i < runs; i++) await sql`select pgflow.start_flow(${flow}, ${sql.json({ i })})`;
  const rows = await readAndStart(sql, flow, worker, [[flow, "a"]], runs);
  assert.equal(rows.length, runs);
  return { worker, tasks: rows.map(claimedTask) };
}

async function taskStatus(sql: postgres.Sql, task: ClaimedTask) {
  const [row] = await sql<{ status: string; attempts_count: number; error_message: string }[]>`
    select status, attempts_count, error_message from pgflow.step_tasks
    where run_id = ${task.runId}::uuid and step_slug = ${task.stepSlug}
      and task_index = ${task.taskIndex}`;
  return row;
}

/** A logger that keeps its records. */
function keptLog(): { log: ReturnType<typeof createLogger>; records: LogRecord[] } {
  const records: LogRecord[] = [];
  return { log: createLogger({ level: "debug", sink: (r) => records.push(r) }), records };
}

/**
 * How many completions each `complete_tasks` call sent: the run ids of its first parameter, which
 * postgres.js's debug hook shows as the array literal sent (`{uuid,uuid}`).
 */
function completionCalls(sent: { query: string; parameters: unknown[] }[]): number[] {
  return sent.filter((q) => /pgflow\.complete_tasks\(/.test(q.query)).map((q) =>
    String(q.parameters[0]).split(",").length
  );
}

function recordingPool(connect: (o: postgres.Options<Record<string, never>>) => postgres.Sql) {
  const sent: { query: string; parameters: unknown[] }[] = [];
  const pool = connect({
    max: 2,
    debug: (_connection: number, query: string, parameters: unknown[]) =>
      sent.push({ query: query.replace(/\s+/g, " ").trim(), parameters }),
  });
  return { pool, sent };
}

db.test("completer: a batch that fails is sent again one by one; an output Postgres refuses fails its attempt", async ({ sql, connect }) => {
  const { tasks: [first, good, bad] } = await claimRuns(sql, "fb_batch", 3);
  const { pool, sent } = recordingPool(connect);
  const { log } = keptLog();
  // Completions of one tick go together: one batch of three.
  const completer = new Completer({ sql: pool, maxInFlight: 1 });
  const receipts = await Promise.all([
    completer.report(first, { kind: "complete", output: '"first"' }, log),
    completer.report(good, { kind: "complete", output: '"good"' }, log),
    // JSON text jsonb refuses (22P05): the batch call fails as a whole.
    completer.report(bad, { kind: "complete", output: '"bad \\u0000"' }, log),
  ]);
  assert.deepEqual(receipts.slice(0, 2), [{ outcome: "completed" }, { outcome: "completed" }]);
  assert.equal(receipts[2].outcome, "retried", "the unstorable output failed the attempt");
  assert.equal(receipts[2].unstorable?.code, "22P05");
  assert.deepEqual(
    [(await taskStatus(sql, first)).status, (await taskStatus(sql, good)).status],
    ["completed", "completed"],
  );
  const badRow = await taskStatus(sql, bad);
  assert.equal(badRow.status, "queued");
  assert.match(badRow.error_message, /output could not be stored \(SQLSTATE 22P05\)/);
  // The batch was tried, and failed, before the one-by-one calls; the bad one was not retried.
  assert.deepEqual(completionCalls(sent), [3, 1, 1, 1]);
});

db.test("completer: completions of one tick go in one call, later ones in the next", async ({ sql, connect }) => {
  const { tasks } = await claimRuns(sql, "fb_coalesce", 5);
  const { pool, sent } = recordingPool(connect);
  const { log } = keptLog();
  const completer = new Completer({ sql: pool, maxInFlight: 1 });
  const complete = (t: ClaimedTask, i: number) =>
    completer.report(t, { kind: "complete", output: `${i}` }, log);
  // Three in one tick; then, once that call is sent (one call at a time here), two more.
  const first = tasks.slice(0, 3).map((t, i) => complete(t, i));
  while (completionCalls(sent).length === 0) await new Promise((r) => setTimeout(r, 1));
  const second = tasks.slice(3).map((t, i) => complete(t, 3 + i));
  await Promise.all([...first, ...second]);
  assert.deepEqual(completionCalls(sent), [3, 2]);
  for (const t of tasks) assert.equal((await taskStatus(sql, t)).status, "completed");
});

db.test("completer: a report that cannot be made is unreported, after its retries, and says so", async ({ sql, connect }) => {
  const { tasks: [task] } = await claimRuns(sql, "fb_unreported", 1);
  const { pool } = recordingPool(connect);
  await pool.end();
  const { log, records } = keptLog();
  const completer = new Completer({ sql: pool, attempts: 2 });
  const receipt = await completer.report(task, { kind: "fail", error: "boom" }, log);
  assert.deepEqual(receipt, { outcome: "unreported" });
  assert.deepEqual(records.map((r) => [r.level, r.event]), [
    ["warn", "fail_task failed; retrying"],
    ["error", "fail_task failed; stalled recovery will take the task back"],
  ]);
  assert.equal((await taskStatus(sql, task)).status, "started", "left for stalled recovery");
});

db.test("poll loop: a worker whose row vanished goes on claiming with its explicit pairs", async ({ sql, url }) => {
  const flow = new Flow<{ n: number }>({ slug: "fb_row_gone" }).step(
    { slug: "double" },
    (input) => input.n * 2,
  );
  const workers: FlowWorker[] = [];
  try {
    const { worker, logs } = await startWorker(workers, flow, { connectionString: url });
    const before = await startRun(sql, "fb_row_gone", { n: 1 });
    assert.equal((await waitForRun(sql, before)).status, "completed");
    // An operator deletes the worker's row while it polls.
    const deleted = await sql`delete from pgflow.workers where worker_id = ${worker.id}::uuid`;
    assert.equal(deleted.count, 1);
    const pollFailures = () =>
      logs.filter((l) => l.event === "poll failed; backing off").map((l) => l.fields.error);
    for (const n of [2, 3]) {
      const run = await startRun(sql, "fb_row_gone", { n });
      // Done when the run ends, or at the first failed poll (the fallback did not take over).
      await waitFor(
        async () => pollFailures().length > 0 || (await runRow(sql, run)).status !== "started",
        { what: `run ${n} to end` },
      );
      assert.deepEqual(pollFailures(), [], "no poll failed");
      assert.deepEqual(await runRow(sql, run), { status: "completed", output: { double: n * 2 } });
    }
    const fallbacks = logs.filter((l) =>
      l.event === "worker row not found; claiming with the explicit support set"
    );
    assert.equal(fallbacks.length, 1, "one fallback, then the explicit pairs for good");
    // The tasks claimed without a row record no worker; the first keeps the id it was claimed by.
    const stamped = await sql`select last_worker_id from pgflow.step_tasks t
      join pgflow.runs r using (run_id) where r.flow_slug = 'fb_row_gone'
      order by (r.input ->> 'n')::int`;
    assert.deepEqual(stamped.map((r) => r.last_worker_id), [worker.id, null, null]);
  } finally {
    await stopAll(workers);
  }
});

db.test("run-input cache: the least recently used run is forgotten first, a hit renews a run", async ({ sql }) => {
  const runs: string[] = [];
  await defineFlow(sql, "fb_inputs", [{ slug: "a" }]);
  for (let i = 1; i <= 3; i++) {
    runs.push(
      (await sql`select run_id from pgflow.start_flow('fb_inputs', ${sql.json({ db: i })})`)[0]
        .run_id,
    );
  }
  const [r1, r2, r3] = runs;
  // A seeded input differs from the stored one, so each answer tells whether it came from the
  // cache (seeded) or from the database (stored).
  const cache = new FlowInputCache(sql, 2);
  cache.seed(r1, "seeded 1");
  cache.seed(r2, "seeded 2");
  assert.equal(await cache.get(r1), "seeded 1"); // r1 is now the most recently used
  cache.seed(r3, "seeded 3"); // evicts r2, the least recently used, not r1
  assert.equal(cache.size, 2);
  assert.equal(await cache.get(r3), "seeded 3");
  assert.equal(await cache.get(r1), "seeded 1", "r1 was renewed by its hit and kept");
  assert.deepEqual(await cache.get(r2), { db: 2 }, "r2 was forgotten: loaded again"); // evicts r3
  assert.deepEqual(await cache.get(r3), { db: 3 }, "r3 was forgotten next"); // evicts r1
  // A loaded input is remembered like a seeded one.
  await sql`update pgflow.runs set input = '"changed"' where run_id = ${r2}::uuid`;
  assert.deepEqual(await cache.get(r2), { db: 2 }, "r2 is served from the cache");
  assert.deepEqual(await cache.get(r1), { db: 1 }, "r1, the least recently used, was forgotten");
  assert.equal(cache.size, 2);
});

db.test("fail_task is given the attempt that ran: a retry fails its own attempt, a late report none", async ({ sql }) => {
  const { worker, tasks: [first] } = await claimRuns(sql, "fb_attempt", 1, { maxAttempts: 2 });
  assert.equal(first.attempt, 1);
  assert.equal(await failTask(sql, first, "attempt 1 failed"), "retried");
  assert.deepEqual(await taskStatus(sql, first), {
    status: "queued",
    attempts_count: 1,
    error_message: "attempt 1 failed",
  });
  await makeVisible(sql, "fb_attempt");
  const [row] = await readAndStart(sql, "fb_attempt", worker, [["fb_attempt", "a"]]);
  const second = claimedTask(row);
  assert.equal(second.attempt, 2);
  // The first attempt's report again (a lost reply, repeated): late, it changes nothing.
  assert.equal(await failTask(sql, first, "attempt 1 failed, reported late"), "ignored");
  assert.deepEqual(await taskStatus(sql, second), {
    status: "started",
    attempts_count: 2,
    error_message: "attempt 1 failed",
  });
  assert.equal(await failTask(sql, second, "attempt 2 failed"), "failed");
  assert.deepEqual(await taskStatus(sql, second), {
    status: "failed",
    attempts_count: 2,
    error_message: "attempt 2 failed",
  });
  const [run] = await sql`select status from pgflow.runs where run_id = ${second.runId}::uuid`;
  assert.equal(run.status, "failed");
});

db.test("a worker's failed attempts are reported with their attempt: retried, then exhausted", async ({ sql, url }) => {
  let calls = 0;
  const flow = new Flow<Record<string, never>>({
    slug: "fb_attempt_worker",
    maxAttempts: 2,
    baseDelay: 1,
  }).step({ slug: "a" }, () => {
    throw new Error(`boom ${++calls}`);
  });
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "fb_attempt_worker", {});
    assert.equal((await waitForRun(sql, run)).status, "failed");
    const [task] = await sql`select status, attempts_count, error_message from pgflow.step_tasks
                             where run_id = ${run}::uuid`;
    assert.deepEqual({ ...task }, { status: "failed", attempts_count: 2, error_message: "boom 2" });
    assert.deepEqual(logs.filter((l) => /fail_task failed/.test(l.event)), []);
    await waitFor(() => logs.filter((l) => l.event === "task failed").length === 2, {
      what: "both attempts logged as failed",
    });
  } finally {
    await stopAll(workers);
  }
});

db.test("a worker's late failure report is ignored: logged with outcome ignored, nothing changed", async ({ sql, url }) => {
  // Attempt 1's handler finds its attempt settled elsewhere while it runs (as stalled recovery or
  // an operator would), then throws: its report is late and must change nothing.
  const flow = new Flow<Record<string, never>>({
    slug: "fb_late",
    maxAttempts: 3,
    baseDelay: 1,
  }).step({ slug: "a" }, async (_input, ctx) => {
    if (ctx.attempt > 1) return "second attempt";
    const t = ctx.stepTask;
    await ctx.sql`select pgflow.fail_task(${t.run_id}::uuid, ${t.step_slug}, ${t.task_index},
                                          'settled elsewhere', ${ctx.attempt})`;
    throw new Error("reported late");
  });
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "fb_late", {});
    const late = await waitFor(() =>
      logs.find((l) => l.event === "task failed" && l.fields.attempt === 1)
    );
    assert.equal(late.level, "warn");
    assert.equal(late.fields.outcome, "ignored");
    assert.equal(late.fields.errorKind, "Error");
    assert.equal((await waitForRun(sql, run)).status, "completed");
    const [task] = await sql`select attempts_count, error_message from pgflow.step_tasks
                             where run_id = ${run}::uuid`;
    // The late report did not overwrite what settled attempt 1, nor count an attempt.
    assert.deepEqual({ ...task }, { attempts_count: 2, error_message: "settled elsewhere" });
  } finally {
    await stopAll(workers);
  }
});
