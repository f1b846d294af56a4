/**
 * A completion that makes a plain dependent ready (one task, no condition, a handler's step: a
 * chain's next step) starts it in complete_tasks' release, without pgflow._start_ready_steps'
 * pass, and a run where any step becoming ready is not plain takes the pass as before. Both must
 * leave the same rows: the same step states, the same tasks on the same queues, the same messages,
 * one notification per queue for a waiter.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  allNotified,
  type ClaimRow,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
  waitForNotifications,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function runRows(sql: Sql, runId: string) {
  const states = await sql`
    select step_slug, status, remaining_deps, initial_tasks, remaining_tasks,
           started_at is not null as started, output
    from pgflow.step_states where run_id = ${runId} order by step_slug`;
  const tasks = await sql`
    select step_slug, task_index, status, queue_name, message_id is not null as sent, input
    from pgflow.step_tasks where run_id = ${runId} order by step_slug, task_index`;
  const [run] = await sql`select status, remaining_steps from pgflow.runs where run_id = ${runId}`;
  return {
    run: { ...run },
    states: states.map((r) => ({ ...r })),
    tasks: tasks.map((r) => ({ ...r })),
  };
}

/** Reads every visible message of `queue` and claims the tasks of `pairs` among them. */
async function claim(sql: Sql, queue: string, pairs: [string, string][]): Promise<ClaimRow[]> {
  const worker = await registerWorker(sql, queue);
  return (await readAndStart(sql, queue, worker, pairs)).filter((r) => r.disposition === "claimed");
}

/** Completes a claimed task with `output`. */
async function complete(sql: Sql, row: ClaimRow, output: unknown): Promise<void> {
  await sql`select * from pgflow.complete_task(${row.run_id}, ${row.step_slug}, ${row.task_index}, ${
    sql.json(output as never)
  }, ${row.attempt})`;
}

/** The one claimed row of `flow`'s `step`. */
function one(rows: ClaimRow[], flow: string, step: string): ClaimRow {
  const row = rows.find((r) => r.flow_slug === flow && r.step_slug === step);
  assert.ok(row, `a claimed ${flow}/${step} task`);
  return row;
}

/** Claims the one visible task of `flow`'s `step` on `queue` and completes it with `output`. */
async function claimAndComplete(
  sql: Sql,
  queue: string,
  flow: string,
  step: string,
  output: unknown,
): Promise<ClaimRow> {
  const row = one(await claim(sql, queue, [[flow, step]]), flow, step);
  await complete(sql, row, output);
  return row;
}

/**
 * What one completion did to step states and which functions it ran, counted in its own
 * transaction as the difference of the statistics before and after it (the counts a backend has
 * not reported yet are in both).
 */
async function completionWork(sql: Sql, row: ClaimRow, output: unknown) {
  return await sql.begin(async (tx) => {
    await tx`set local track_functions = 'pl'`;
    const counts = async () => {
      const [c] = await tx`
        select (select coalesce(sum(calls), 0)::int from pg_stat_xact_user_functions
                where schemaname = 'pgflow' and funcname = '_start_ready_steps') as passes,
               (select coalesce(sum(n_tup_upd), 0)::int from pg_stat_xact_user_tables
                where schemaname = 'pgflow' and relname = 'step_states') as updates`;
      return { passes: c.passes as number, stateUpdates: c.updates as number };
    };
    const before = await counts();
    await complete(tx as unknown as Sql, row, output);
    const after = await counts();
    return {
      passes: after.passes - before.passes,
      stateUpdates: after.stateUpdates - before.stateUpdates,
    };
  });
}

db.test("a chain's plain next step starts with exactly the rows the ready-step pass makes", async ({ sql, connect }) => {
  // "slow" is the same chain with a condition on b that every output meets ({} is contained in
  // any object): the ready-step pass, same outcome.
  const shape = [
    { slug: "a", queue: "hop_qa" },
    { slug: "b", deps: ["a"], queue: "hop_qb" },
    { slug: "c", deps: ["b"], queue: "hop_qb" },
  ];
  await defineFlow(sql, "hop_fast", shape, { mode: "routed" });
  await defineFlow(sql, "hop_slow", shape, { mode: "routed" });
  await sql`update pgflow.steps set required_input_pattern = '{}'::jsonb
            where flow_slug = 'hop_slow' and step_slug = 'b'`;
  const [fast] = await sql`select * from pgflow.start_flow('hop_fast', '{"x":1}')`;
  const [slow] = await sql`select * from pgflow.start_flow('hop_slow', '{"x":1}')`;

  const listener = connect();
  const heard: string[] = [];
  await listener.listen("pgflow_queue:hop_qb", () => heard.push("hop_qb"));
  await waitForNotifications(listener, ["pgflow_queue:hop_qb"]);

  const roots = await claim(sql, "hop_qa", [["hop_fast", "a"], ["hop_slow", "a"]]);
  await complete(sql, one(roots, "hop_fast", "a"), { y: 2 });
  await complete(sql, one(roots, "hop_slow", "a"), { y: 2 });
  const fastRows = await runRows(sql, fast.run_id);
  assert.deepEqual(fastRows, await runRows(sql, slow.run_id));
  assert.deepEqual(fastRows.run, { status: "started", remaining_steps: 2 });
  assert.deepEqual(
    fastRows.states.map((
      s,
    ) => [s.step_slug, s.status, s.remaining_deps, s.initial_tasks, s.remaining_tasks]),
    [["a", "completed", 0, 1, 0], ["b", "started", 0, 1, 1], ["c", "created", 1, null, null]],
  );
  assert.deepEqual(fastRows.tasks.map((t) => [t.step_slug, t.status, t.queue_name, t.sent]), [
    ["a", "completed", "hop_qa", true],
    ["b", "queued", "hop_qb", true],
  ]);
  assert.deepEqual((await queueMessages(sql, "hop_qb")).map((m) => m.message), [
    { flow_slug: "hop_fast", run_id: fast.run_id, step_slug: "b", task_index: 0 },
    { flow_slug: "hop_slow", run_id: slow.run_id, step_slug: "b", task_index: 0 },
  ]);
  // Events are ordered by these times: the dependent starts after the step that released it.
  const [times] = await sql`
    select (select completed_at from pgflow.step_states where run_id = ${fast.run_id} and step_slug = 'a')
        <= (select started_at from pgflow.step_states where run_id = ${fast.run_id} and step_slug = 'b') as ordered`;
  assert.equal(times.ordered, true);
  await allNotified(listener, sql);
  assert.deepEqual(heard, ["hop_qb", "hop_qb"]);

  // The hop's input is the dependency's output, and the chain runs to its end.
  const b = one(await claim(sql, "hop_qb", [["hop_fast", "b"]]), "hop_fast", "b");
  await complete(sql, b, { z: 3 });
  assert.deepEqual(b.input, { a: { y: 2 } });
  const c = await claimAndComplete(sql, "hop_qb", "hop_fast", "c", 4);
  assert.deepEqual(c.input, { b: { z: 3 } });
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${fast.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { c: 4 }]);
});

db.test("a chain hop runs no ready-step pass and writes the dependent's state once", async ({ sql }) => {
  const shape = [{ slug: "a", queue: "hopw_qa" }, { slug: "b", deps: ["a"], queue: "hopw_qb" }];
  await defineFlow(sql, "hopw_fast", shape, { mode: "routed" });
  await defineFlow(sql, "hopw_slow", shape, { mode: "routed" });
  await sql`update pgflow.steps set required_input_pattern = '{}'::jsonb
            where flow_slug = 'hopw_slow' and step_slug = 'b'`;
  await sql`select pgflow.start_flow('hopw_fast', '{}')`;
  await sql`select pgflow.start_flow('hopw_slow', '{}')`;
  const worker = await registerWorker(sql, "hopw_qa");
  const claimed =
    (await readAndStart(sql, "hopw_qa", worker, [["hopw_fast", "a"], ["hopw_slow", "a"]]))
      .filter((r) => r.disposition === "claimed");
  const fastRow = claimed.find((r) => r.flow_slug === "hopw_fast")!;
  const slowRow = claimed.find((r) => r.flow_slug === "hopw_slow")!;

  // a completes, b is released and started: two updates of step states, no pass.
  assert.deepEqual(await completionWork(sql, fastRow, 1), { passes: 0, stateUpdates: 2 });
  // The conditional dependent takes the pass, which starts it with an update of its own: what
  // the figures above would be without the release starting plain steps.
  assert.deepEqual(await completionWork(sql, slowRow, 1), { passes: 1, stateUpdates: 3 });
});

db.test("a fan-in's dependent starts once, when its last dependency completes, alone or in one batch", async ({ sql }) => {
  const shape = [
    { slug: "a", queue: "hopf_q" },
    { slug: "b", queue: "hopf_q" },
    { slug: "c", deps: ["a", "b"], queue: "hopf_next" },
  ];
  await defineFlow(sql, "hopf", shape, { mode: "routed" });
  const [one] = await sql`select * from pgflow.start_flow('hopf', '{}')`;
  const [two] = await sql`select * from pgflow.start_flow('hopf', '{}')`;
  const worker = await registerWorker(sql, "hopf_q");
  const rows = (await readAndStart(sql, "hopf_q", worker, [["hopf", "a"], ["hopf", "b"]]))
    .filter((r) => r.disposition === "claimed");
  assert.equal(rows.length, 4);
  const of = (run: string, step: string) =>
    rows.find((r) => r.run_id === run && r.step_slug === step)!;
  const complete = async (batch: ClaimRow[]) =>
    await sql`select * from pgflow.complete_tasks(
      ${batch.map((r) => r.run_id!)}::uuid[], ${batch.map((r) => r.step_slug!)}::text[],
      ${batch.map((r) => r.task_index!)}::integer[],
      ${batch.map((r) => JSON.stringify(r.step_slug))}::text[]::jsonb[],
      ${batch.map((r) => r.attempt!)}::integer[])`;

  // Run one: a alone leaves c waiting; b then starts it. Run two: both in one batch.
  await complete([of(one.run_id, "a")]);
  assert.equal((await queueMessages(sql, "hopf_next")).length, 0, "c waits for b");
  await complete([of(one.run_id, "b"), of(two.run_id, "b"), of(two.run_id, "a")]);
  for (const run of [one.run_id, two.run_id]) {
    const state = await runRows(sql, run);
    assert.deepEqual(
      state.states.map((s) => [s.step_slug, s.status, s.remaining_deps, s.remaining_tasks]),
      [["a", "completed", 0, 0], ["b", "completed", 0, 0], ["c", "started", 0, 1]],
    );
    assert.deepEqual(state.tasks.filter((t) => t.step_slug === "c").map((t) => t.status), [
      "queued",
    ]);
  }
  const next = await queueMessages(sql, "hopf_next");
  assert.deepEqual(
    next.map((m) => (m.message as { run_id: string }).run_id).sort(),
    [one.run_id, two.run_id].sort(),
  );
  const c = (await readAndStart(sql, "hopf_next", worker, [["hopf", "c"]]))
    .filter((r) => r.disposition === "claimed" && r.run_id === two.run_id);
  assert.deepEqual(c.map((r) => r.input), [{ a: "a", b: "b" }]);
});

db.test("a run whose ready steps are not all plain starts them all in step order through the pass", async ({ sql }) => {
  // b is plain, c's condition fails the run: as before, b started first is cancelled with the run
  // and leaves no message behind, and c's failure is the run's.
  const shape = [
    { slug: "a", queue: "hopm_q" },
    { slug: "b", deps: ["a"], queue: "hopm_next" },
    { slug: "c", deps: ["a"], queue: "hopm_next" },
  ];
  await defineFlow(sql, "hopm", shape, { mode: "routed" });
  await sql`update pgflow.steps set required_input_pattern = '{"go": true}'::jsonb, when_unmet = 'fail'
            where flow_slug = 'hopm' and step_slug = 'c'`;
  const [run] = await sql`select * from pgflow.start_flow('hopm', '{}')`;
  await claimAndComplete(sql, "hopm_q", "hopm", "a", { go: false });
  const rows = await runRows(sql, run.run_id);
  assert.equal(rows.run.status, "failed");
  assert.deepEqual(rows.states.map((s) => [s.step_slug, s.status]), [
    ["a", "completed"],
    ["b", "started"],
    ["c", "failed"],
  ]);
  assert.deepEqual(rows.tasks.map((t) => [t.step_slug, t.status, t.sent]), [
    ["a", "completed", true],
    ["b", "cancelled", false],
  ]);
  assert.equal((await queueMessages(sql, "hopm_next")).length, 0);
});

db.test("a chain hop leaves the step definitions' rows untouched: no row lock, no write", async ({ sql }) => {
  await defineFlow(sql, "hopl", [{ slug: "a", queue: "hopl_qa" }, {
    slug: "b",
    deps: ["a"],
    queue: "hopl_qb",
  }], { mode: "routed" });
  await sql`select pgflow.start_flow('hopl', '{}')`;
  const [claimed] = await claim(sql, "hopl_qa", [["hopl", "a"]]);
  // A row locked by a transaction keeps that transaction's id in xmax once it has ended.
  const lockers = async () =>
    (await sql`select step_slug, xmax::text as xmax from pgflow.steps
               where flow_slug = 'hopl' order by step_slug`).map((r) => ({ ...r }));
  const flowLocker = async () =>
    (await sql`select xmax::text as xmax from pgflow.flows where flow_slug = 'hopl'`)[0].xmax;
  const before = await lockers();
  const flowBefore = await flowLocker();
  await complete(sql, claimed, 1);
  assert.equal((await queueMessages(sql, "hopl_qb")).length, 1, "b was started and sent");
  assert.deepEqual(await lockers(), before);
  assert.equal(await flowLocker(), flowBefore);
});

db.test("a task still needs its step state, and a step with tasks cannot be deleted", async ({ sql }) => {
  await defineFlow(sql, "hopk", [{ slug: "a", queue: "hopk_q" }], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('hopk', '{}')`;
  await assert.rejects(
    sql`insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, queue_name)
        values (${run.run_id}, 'hopk', 'nope', 0, 'hopk_q')`,
    /step_tasks_step_state_fkey/,
  );
  await assert.rejects(
    sql`delete from pgflow.steps where flow_slug = 'hopk' and step_slug = 'a'`,
    /step_states_step_fkey/,
  );
});

db.test("a fan-out's plain dependents all start in the release, each with one task and message", async ({ sql }) => {
  await defineFlow(sql, "hopo", [
    { slug: "a", queue: "hopo_qa" },
    { slug: "b", deps: ["a"], queue: "hopo_next" },
    { slug: "c", deps: ["a"], queue: "hopo_next" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('hopo', '{}')`;
  const [row] = await claim(sql, "hopo_qa", [["hopo", "a"]]);
  assert.deepEqual(await completionWork(sql, row, 7), { passes: 0, stateUpdates: 3 });
  const rows = await runRows(sql, run.run_id);
  assert.deepEqual(
    rows.states.map((s) => [s.step_slug, s.status, s.initial_tasks, s.remaining_tasks]),
    [["a", "completed", 1, 0], ["b", "started", 1, 1], ["c", "started", 1, 1]],
  );
  assert.deepEqual(rows.tasks.map((t) => [t.step_slug, t.status, t.sent]), [
    ["a", "completed", true],
    ["b", "queued", true],
    ["c", "queued", true],
  ]);
  const next = await claim(sql, "hopo_next", [["hopo", "b"], ["hopo", "c"]]);
  assert.deepEqual(next.map((r) => [r.step_slug, r.input]).sort(), [["b", { a: 7 }], ["c", {
    a: 7,
  }]]);
});
