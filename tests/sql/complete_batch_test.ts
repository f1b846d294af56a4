/**
 * pgflow.complete_tasks applies a batch as a few set-based statements: several tasks of one step,
 * several steps of one run, duplicates and late reports in one call must end exactly as the same
 * reports sent one by one would, and the plan must read only the batch's rows after a burst.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  type ClaimRow,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Report {
  run_id: string;
  step_slug: string;
  task_index: number;
  output: unknown;
  attempt: number;
}

async function completeBatch(sql: Sql, reports: Report[]): Promise<ClaimRow[]> {
  return await sql<ClaimRow[]>`select * from pgflow.complete_tasks(
    ${reports.map((r) => r.run_id)}::uuid[], ${reports.map((r) => r.step_slug)}::text[],
    ${reports.map((r) => r.task_index)}::integer[],
    ${reports.map((r) => JSON.stringify(r.output))}::text[]::jsonb[],
    ${reports.map((r) => r.attempt)}::integer[])`;
}

const report = (r: ClaimRow, output: unknown, attempt = r.attempt!): Report => ({
  run_id: r.run_id!,
  step_slug: r.step_slug!,
  task_index: r.task_index!,
  output,
  attempt,
});

db.test("a map's tasks completed in two batches: output in index order, the step completes once", async ({ sql }) => {
  await defineFlow(sql, "cb_map", [
    { slug: "each", type: "map", queue: "cb_map_q" },
    { slug: "after", deps: ["each"], queue: "cb_map_next" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('cb_map', '[10, 11, 12, 13, 14]')`;
  const worker = await registerWorker(sql, "cb_map_q");
  const rows = await readAndStart(sql, "cb_map_q", worker, [["cb_map", "each"]]);
  assert.equal(rows.length, 5);
  const byIndex = [...rows].sort((a, b) => a.task_index! - b.task_index!);
  // Out of index order, one task twice in the second batch.
  const first = await completeBatch(sql, [byIndex[3], byIndex[1]].map((r) => report(r, r.input)));
  assert.equal(first.length, 2);
  const [mid] = await sql`select status, remaining_tasks from pgflow.step_states
                          where run_id = ${run.run_id} and step_slug = 'each'`;
  assert.deepEqual([mid.status, mid.remaining_tasks], ["started", 3]);
  assert.equal((await queueMessages(sql, "cb_map_next")).length, 0, "the dependent waits");

  const second = await completeBatch(sql, [
    report(byIndex[4], 14),
    report(byIndex[0], 10),
    report(byIndex[2], 12),
    report(byIndex[0], "duplicate"),
  ]);
  assert.equal(second.length, 3);
  const [each] = await sql`select status, remaining_tasks, output from pgflow.step_states
                           where run_id = ${run.run_id} and step_slug = 'each'`;
  assert.deepEqual([each.status, each.remaining_tasks, each.output], [
    "completed",
    0,
    [10, 11, 12, 13, 14],
  ]);
  assert.equal(
    (await queueMessages(sql, "cb_map_next")).length,
    1,
    "one dependent task, sent once",
  );
  assert.equal((await archivedMessages(sql, "cb_map_q")).length, 5);
  const [r] =
    await sql`select remaining_steps, status from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([r.remaining_steps, r.status], [1, "started"]);
});

db.test("both dependencies of a step completed in one batch release it once, with both outputs", async ({ sql }) => {
  await defineFlow(sql, "cb_fanin", [
    { slug: "left", queue: "cb_fanin_q" },
    { slug: "right", queue: "cb_fanin_q" },
    { slug: "join", deps: ["left", "right"], queue: "cb_fanin_join" },
  ], { mode: "routed" });
  const runs = await sql`select run_id from pgflow.start_flow('cb_fanin', '{}')
                         union all select run_id from pgflow.start_flow('cb_fanin', '{}')`;
  const worker = await registerWorker(sql, "cb_fanin_q");
  const rows = await readAndStart(sql, "cb_fanin_q", worker, [["cb_fanin", "left"], [
    "cb_fanin",
    "right",
  ]]);
  assert.equal(rows.length, 4);
  const done = await completeBatch(sql, rows.map((r) => report(r, `${r.step_slug}!`)));
  assert.equal(done.length, 4);
  const joins = await sql`select run_id, status, remaining_deps from pgflow.step_states
                          where step_slug = 'join' order by run_id`;
  assert.deepEqual(joins.map((j) => [j.status, j.remaining_deps]), [["started", 0], [
    "started",
    0,
  ]]);
  const msgs = await queueMessages(sql, "cb_fanin_join");
  assert.equal(msgs.length, 2, "one join task per run");
  const joinWorker = await registerWorker(sql, "cb_fanin_join");
  const claimed = await readAndStart(sql, "cb_fanin_join", joinWorker, [["cb_fanin", "join"]]);
  assert.deepEqual(claimed.map((c) => c.input), [{ left: "left!", right: "right!" }, {
    left: "left!",
    right: "right!",
  }]);
  await completeBatch(sql, claimed.map((c) => report(c, "joined")));
  const finished = await sql`select status, output from pgflow.runs
                             where run_id = any (${runs.map((r) => r.run_id)}::uuid[])`;
  assert.deepEqual(finished.map((f) => [f.status, f.output]), [
    ["completed", { join: "joined" }],
    ["completed", { join: "joined" }],
  ]);
});

db.test("a task reported twice with a stale attempt first completes with the current attempt's output", async ({ sql }) => {
  await defineFlow(sql, "cb_dup", [{ slug: "a", queue: "cb_dup_q" }], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('cb_dup', '{}')`;
  const worker = await registerWorker(sql, "cb_dup_q");
  const [row] = await readAndStart(sql, "cb_dup_q", worker, [["cb_dup", "a"]]);
  const done = await completeBatch(sql, [
    report(row, "stale", row.attempt! + 5),
    report(row, "fresh"),
  ]);
  assert.equal(done.length, 1);
  const [r] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([r.status, r.output], ["completed", { a: "fresh" }]);
});

db.test("a batch spanning a failed run completes the others and leaves the failed run as it is", async ({ sql }) => {
  await defineFlow(sql, "cb_mixed", [{ slug: "a", queue: "cb_mixed_q" }], { mode: "routed" });
  const runs = await sql`select run_id from pgflow.start_flow('cb_mixed', '{}')
                         union all select run_id from pgflow.start_flow('cb_mixed', '{}')
                         union all select run_id from pgflow.start_flow('cb_mixed', '{}')`;
  const worker = await registerWorker(sql, "cb_mixed_q");
  const rows = await readAndStart(sql, "cb_mixed_q", worker, [["cb_mixed", "a"]]);
  assert.equal(rows.length, 3);
  const failed = rows[1].run_id!;
  await sql`select pgflow._fail_run(${failed}::uuid, 'a', 'failed elsewhere')`;
  const done = await completeBatch(sql, rows.map((r) => report(r, 1)));
  assert.deepEqual(done.map((d) => d.run_id).sort(), [rows[0].run_id, rows[2].run_id].sort());
  const states = await sql`select run_id, status from pgflow.runs
                           where run_id = any (${runs.map((r) => r.run_id)}::uuid[])`;
  for (const s of states) assert.equal(s.status, s.run_id === failed ? "failed" : "completed");
  const [task] = await sql`select status, output from pgflow.step_tasks where run_id = ${failed}`;
  assert.deepEqual([task.status, task.output], ["cancelled", null]);
});

db.test("after a burst, a completion batch reads only its own rows", async ({ sql, connect }) => {
  await defineFlow(sql, "cb_burst", [{ slug: "a", queue: "cb_burst_q" }], { mode: "routed" });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'cb_burst_q', 'test_fn', '[["cb_burst", "a"]]'::jsonb)`;
  const workerSql = connect();
  const claimAndComplete = async (qty: number, counted: boolean) => {
    const rows = await workerSql<ClaimRow[]>`
      select run_id, step_slug, task_index, attempt from pgflow.read_and_claim(
        'cb_burst_q', ${worker}::uuid, 30, ${qty}, 0) where disposition = 'claimed'`;
    if (!counted) {
      await completeBatch(workerSql, rows.map((r) => report(r, {})));
      return [];
    }
    return await workerSql.begin(async (tx) => {
      const counters = () =>
        tx<{ relname: string; n: number }[]>`
          select relname, (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::int as n
          from pg_stat_xact_user_tables
          where schemaname = 'pgflow' and relname in ('runs', 'step_states', 'step_tasks')
          order by relname`;
      const before = await counters();
      const done = await completeBatch(tx as unknown as Sql, rows.map((r) => report(r, {})));
      assert.equal(done.length, qty);
      const after = await counters();
      return after.map((a) => ({
        relname: a.relname,
        n: a.n - (before.find((b) => b.relname === a.relname)?.n ?? 0),
      }));
    });
  };
  // Plans cached by the worker's session while the tables are small (see claim_plan_test.ts).
  for (let i = 0; i < 8; i++) {
    await sql`select count(pgflow.start_flow('cb_burst', '{}'::jsonb)) from generate_series(1, 5)`;
    await claimAndComplete(5, false);
  }
  await sql`select count(pgflow.start_flow('cb_burst', '{}'::jsonb)) from generate_series(1, 1500)`;
  // Tasks another worker has started and not finished: a busy queue's partial index of started
  // tasks is large, and walking it is not a key lookup.
  const other = crypto.randomUUID();
  await sql`select pgflow.register_worker(${other}, 'cb_burst_q', 'test_fn', '[["cb_burst", "a"]]'::jsonb)`;
  await sql`select count(*) from pgflow.read_and_claim('cb_burst_q', ${other}::uuid, 30, 500, 0)`;
  const batch = 10;
  for (let round = 0; round < 3; round++) {
    for (const a of await claimAndComplete(batch, true)) {
      assert.ok(
        a.n <= 6 * batch,
        `round ${round}: completing ${batch} tasks read ${a.n} rows of ${a.relname}`,
      );
    }
  }
});
