/**
 * Hands on a run in SQL: pgflow.cancel_run, retry_run, resume_run, list_runs and the attempt
 * history (pgflow.task_attempts, get_run's `attempts`), on a shared queue with other flows' and
 * unknown messages beside the run's own.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { type Blocked, sendBlocked } from "../support/blocked.ts";
import { testDatabase } from "../support/db.ts";
import { asRole, ensureClientRoles } from "../support/roles.ts";
import {
  archivedMessages,
  defineFlow,
  makeVisible,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function run(sql: Sql, runId: string) {
  const [row] = await sql`select * from pgflow.runs where run_id = ${runId}`;
  return row;
}

async function tasks(sql: Sql, runId: string) {
  return await sql`select step_slug, task_index, status, message_id::text as message_id, output
                   from pgflow.step_tasks where run_id = ${runId} order by step_slug, task_index`;
}

db.test("cancel_run: the run's tasks and messages end, the shared queue's other messages stay exactly as they were", async ({ sql }) => {
  await defineFlow(sql, "cx_a", [{ slug: "one", queue: "cx_shared" }, {
    slug: "two",
    queue: "cx_shared",
  }], { mode: "routed" });
  await defineFlow(sql, "cx_b", [{ slug: "one", queue: "cx_shared" }], { mode: "routed" });
  const [a] = await sql`select run_id from pgflow.start_flow('cx_a', '{}')`;
  const [b] = await sql`select run_id from pgflow.start_flow('cx_b', '{}')`;
  const [{ id: foreign }] = await sql`select pgmq.send('cx_shared', '{"not": "pgflow"}') as id`;
  // One of a's tasks is running when the operator cancels.
  const worker = await registerWorker(sql, "cx_shared");
  const claimed = (await readAndStart(sql, "cx_shared", worker, [["cx_a", "one"]], 10))
    .filter((r) => r.disposition === "claimed");
  assert.equal(claimed.length, 1);
  await makeVisible(sql, "cx_shared");
  const before = (await queueMessages(sql, "cx_shared")).filter((m) =>
    String(m.msg_id) === String(foreign) ||
    (m.message as { run_id?: string }).run_id === b.run_id
  );
  assert.equal(before.length, 2);

  const [result] = await sql`select * from pgflow.cancel_run(${a.run_id}, 'wrong input')`;
  assert.deepEqual({ ...result }, {
    run_id: a.run_id,
    flow_slug: "cx_a",
    status: "cancelled",
    cancelled: true,
  });
  const row = await run(sql, a.run_id);
  assert.equal(row.status, "cancelled");
  assert.equal(row.cancel_reason, "wrong input");
  assert.ok(row.cancelled_at instanceof Date);
  assert.deepEqual(
    (await tasks(sql, a.run_id)).map((t) => [t.step_slug, t.status]),
    [["one", "cancelled"], ["two", "cancelled"]],
  );
  const steps = await sql`select step_slug, status from pgflow.step_states
                          where run_id = ${a.run_id} order by step_slug`;
  assert.deepEqual(steps.map((s) => s.status), ["cancelled", "cancelled"]);
  // a's messages are archived by their exact ids; b's message and the foreign one are untouched.
  const live = await queueMessages(sql, "cx_shared");
  assert.deepEqual(
    live.map((m) => String(m.msg_id)).sort(),
    before.map((m) => String(m.msg_id)).sort(),
  );
  for (const m of before) {
    const now = live.find((l) => String(l.msg_id) === String(m.msg_id))!;
    assert.equal(now.read_ct, m.read_ct);
    assert.equal(now.vt.getTime(), m.vt.getTime());
  }
  const archived = (await archivedMessages(sql, "cx_shared")).map((m) =>
    (m.message as { run_id?: string }).run_id
  );
  assert.deepEqual(archived, [a.run_id, a.run_id]);
  // The attempt that was running is in the history as cancelled.
  const [attempt] = await sql`select attempt, outcome, worker_id, error_message
                              from pgflow.task_attempts where run_id = ${a.run_id}`;
  assert.deepEqual({ ...attempt }, {
    attempt: 1,
    outcome: "cancelled",
    worker_id: worker,
    error_message: "run cancelled: wrong input",
  });

  // Its late reports change nothing.
  const t = claimed[0];
  await sql`select pgflow.complete_task(${t.run_id}, ${t.step_slug}, 0, '1', ${t.attempt})`;
  await sql`select pgflow.fail_task(${t.run_id}, ${t.step_slug}, 0, 'late', ${t.attempt})`;
  assert.equal((await run(sql, a.run_id)).status, "cancelled");
  assert.equal((await tasks(sql, a.run_id))[0].status, "cancelled");

  // Again: harmless, and says so. A run that ended is left as it is.
  const [again] = await sql`select * from pgflow.cancel_run(${a.run_id})`;
  assert.deepEqual([again.status, again.cancelled], ["cancelled", false]);
  assert.equal((await run(sql, a.run_id)).cancel_reason, "wrong input");
  await sql`update pgflow.runs set status = 'completed', completed_at = now() where run_id = ${b.run_id}`;
  const [done] = await sql`select * from pgflow.cancel_run(${b.run_id})`;
  assert.deepEqual([done.status, done.cancelled], ["completed", false]);
  await assert.rejects(
    sql`select * from pgflow.cancel_run(${crypto.randomUUID()})`,
    (e: { code?: string; message: string }) =>
      e.code === "P0002" && /run .* does not exist/.test(e.message),
  );
});

db.test("retry_run: a new run of the same flow and input with its lineage; the source stays as it was", async ({ sql }) => {
  await defineFlow(sql, "rt_flow", [{ slug: "a" }], { maxAttempts: 1 });
  const [src] = await sql`select run_id from pgflow.start_flow('rt_flow', '{"n": 7}')`;
  await assert.rejects(
    sql`select pgflow.retry_run(${src.run_id})`,
    (e: { code?: string; message: string }) =>
      e.code === "55000" &&
      /is started; only failed or cancelled runs can be retried/.test(e.message),
  );
  const worker = await registerWorker(sql, "rt_flow");
  const [t] = await readAndStart(sql, "rt_flow", worker, [["rt_flow", "a"]]);
  await sql`select pgflow.fail_task(${t.run_id}, 'a', 0, 'api down', ${t.attempt}, 'Error: api down\n    at handler (x.ts:1:1)')`;
  const source = await run(sql, src.run_id);
  assert.equal(source.status, "failed");

  const [created] = await sql`select * from pgflow.retry_run(${src.run_id})`;
  assert.notEqual(created.run_id, src.run_id);
  assert.deepEqual(
    [
      created.flow_slug,
      created.status,
      created.input,
      created.restart_of_run_id,
      created.restart_mode,
    ],
    ["rt_flow", "started", { n: 7 }, src.run_id, "retry"],
  );
  assert.deepEqual({ ...(await run(sql, src.run_id)) }, { ...source });
  assert.deepEqual((await tasks(sql, created.run_id)).map((r) => r.status), ["queued"]);
  // The failed attempt of the source is in its history, with the stack.
  const [history] = await sql`select outcome, error_message, error_stack from pgflow.task_attempts
                              where run_id = ${src.run_id}`;
  assert.deepEqual({ ...history }, {
    outcome: "failed",
    error_message: "api down",
    error_stack: "Error: api down\n    at handler (x.ts:1:1)",
  });
  await assert.rejects(
    sql`select pgflow.retry_run(${crypto.randomUUID()})`,
    (e: { code?: string }) => e.code === "P0002",
  );
});

db.test("resume_run: completed steps and the completed tasks of a map are reused; only the rest runs", async ({ sql }) => {
  await defineFlow(sql, "rs_flow", [
    { slug: "split" },
    { slug: "each", deps: ["split"], type: "map", maxAttempts: 1 },
    { slug: "sum", deps: ["each"] },
  ]);
  const [src] = await sql`select run_id from pgflow.start_flow('rs_flow', '{}')`;
  const worker = await registerWorker(sql, "rs_flow");
  const pairs: [string, string][] = [["rs_flow", "split"], ["rs_flow", "each"], ["rs_flow", "sum"]];
  const [split] = await readAndStart(sql, "rs_flow", worker, pairs);
  await sql`select pgflow.complete_task(${split.run_id}, 'split', 0, ${
    sql.json([10, 11, 12, 13, 14, 15, 16, 17, 18, 19])
  }, ${split.attempt})`;
  const each = await readAndStart(sql, "rs_flow", worker, pairs, 20);
  assert.equal(each.length, 10);
  // Nine complete, the one at index 4 fails for good: the run fails.
  for (const t of each.filter((t) => t.task_index !== 4)) {
    await sql`select pgflow.complete_task(${t.run_id}, 'each', ${t.task_index}, ${
      sql.json((t.input as number) * 2)
    }, ${t.attempt})`;
  }
  const four = each.find((t) => t.task_index === 4)!;
  await sql`select pgflow.fail_task(${four.run_id}, 'each', 4, 'boom', ${four.attempt})`;
  assert.equal((await run(sql, src.run_id)).status, "failed");
  const sentBefore = (await queueMessages(sql, "rs_flow")).length +
    (await archivedMessages(sql, "rs_flow")).length;

  const [created] = await sql`select * from pgflow.resume_run(${src.run_id})`;
  assert.deepEqual([created.status, created.restart_of_run_id, created.restart_mode], [
    "started",
    src.run_id,
    "resume",
  ]);
  const states = await sql`select step_slug, status, reused, remaining_tasks from pgflow.step_states
                           where run_id = ${created.run_id} order by step_slug`;
  assert.deepEqual(states.map((s) => [s.step_slug, s.status, s.reused, s.remaining_tasks]), [
    ["each", "started", false, 1],
    ["split", "completed", true, 0],
    ["sum", "created", false, null],
  ]);
  // Exactly one message was sent: the map's task 4.
  const sentAfter = (await queueMessages(sql, "rs_flow")).length +
    (await archivedMessages(sql, "rs_flow")).length;
  assert.equal(sentAfter - sentBefore, 1);
  const [retry] = await readAndStart(sql, "rs_flow", worker, pairs);
  assert.deepEqual([retry.run_id, retry.step_slug, retry.task_index, retry.input], [
    created.run_id,
    "each",
    4,
    14,
  ]);
  await sql`select pgflow.complete_task(${retry.run_id}, 'each', 4, '28', ${retry.attempt})`;
  const [sum] = await readAndStart(sql, "rs_flow", worker, pairs);
  assert.deepEqual(sum.input, { each: [20, 22, 24, 26, 28, 30, 32, 34, 36, 38] });
  await sql`select pgflow.complete_task(${sum.run_id}, 'sum', 0, '290', ${sum.attempt})`;
  const done = await run(sql, created.run_id);
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, { sum: 290 });
  // The source is untouched.
  assert.equal((await run(sql, src.run_id)).status, "failed");
});

db.test("resume_run of a cancelled run whose every step had completed but one reuses them and runs that one", async ({ sql }) => {
  await defineFlow(sql, "rs_two", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  const [src] = await sql`select run_id from pgflow.start_flow('rs_two', '"x"')`;
  const worker = await registerWorker(sql, "rs_two");
  const pairs: [string, string][] = [["rs_two", "a"], ["rs_two", "b"]];
  const [a] = await readAndStart(sql, "rs_two", worker, pairs);
  await sql`select pgflow.complete_task(${a.run_id}, 'a', 0, '"A"', ${a.attempt})`;
  await sql`select * from pgflow.cancel_run(${src.run_id}, 'pause')`;
  const [created] = await sql`select * from pgflow.resume_run(${src.run_id})`;
  const [b] = await readAndStart(sql, "rs_two", worker, pairs);
  assert.deepEqual([b.run_id, b.step_slug, b.input], [created.run_id, "b", { a: "A" }]);
  await assert.rejects(
    sql`select pgflow.resume_run(${created.run_id})`,
    (e: { code?: string; message: string }) =>
      e.code === "55000" && /only failed or cancelled runs can be resumed/.test(e.message),
  );
});

db.test("attempt history: failed and stalled attempts are kept, and get_run shows them", async ({ sql }) => {
  await defineFlow(sql, "ah_flow", [{ slug: "a", maxAttempts: 3, baseDelay: 1, timeout: 3 }]);
  const [src] = await sql`select run_id from pgflow.start_flow('ah_flow', '{}')`;
  const worker = await registerWorker(sql, "ah_flow");
  const [first] = await readAndStart(sql, "ah_flow", worker, [["ah_flow", "a"]]);
  await sql`select pgflow.fail_task(${first.run_id}, 'a', 0, 'first', ${first.attempt}, ${
    "x".repeat(5000)
  })`;
  await makeVisible(sql, "ah_flow");
  const [second] = await readAndStart(sql, "ah_flow", worker, [["ah_flow", "a"]]);
  assert.equal(second.attempt, 2);
  // The worker dies: stalled recovery takes the task back.
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour' where run_id = ${src.run_id}`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 1);
  const rows = await sql`select attempt, outcome, worker_id, length(error_stack) as stack
                         from pgflow.task_attempts where run_id = ${src.run_id} order by attempt`;
  assert.deepEqual(rows.map((r) => [r.attempt, r.outcome, r.worker_id, r.stack]), [
    [1, "failed", worker, 4000],
    [2, "stalled", worker, null],
  ]);
  const [{ doc }] = await sql`select pgflow.get_run(${src.run_id}) as doc`;
  const step = doc.steps[0];
  assert.deepEqual(
    step.attempts.map((a: Record<string, unknown>) => [a.attempt, a.outcome, a.task_index]),
    [[1, "failed", 0], [2, "stalled", 0]],
  );
  assert.match(step.attempts[1].error_message, /^stalled: no completion within 33 s/);
  assert.equal(step.reused, false);
  assert.equal(doc.restart_of_run_id, null);
  // Pruning the run takes its history with it.
  await sql`select * from pgflow.cancel_run(${src.run_id})`;
  await sql`update pgflow.runs set cancelled_at = now() - interval '2 days' where run_id = ${src.run_id}`;
  assert.equal((await sql`select pgflow.prune_data_older_than('1 day') as n`)[0].n, 1);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.task_attempts where run_id = ${src.run_id}`)[0]
      .n,
    0,
  );
});

db.test("list_runs: newest first, by flow, status, time and id prefix; bad filters are named", async ({ sql }) => {
  await defineFlow(sql, "ls_a", [{ slug: "a" }]);
  await defineFlow(sql, "ls_b", [{ slug: "a" }]);
  const ids: string[] = [];
  for (const flow of ["ls_a", "ls_b", "ls_a"]) {
    const [r] = await sql`select run_id from pgflow.start_flow(${flow}, '{}')`;
    ids.push(r.run_id);
  }
  await sql`select * from pgflow.cancel_run(${ids[0]})`;
  const list = async (args: string) =>
    (await sql.unsafe(`select pgflow.list_runs(${args}) as r`)).map((row) => row.r.run_id);
  assert.deepEqual(await list("flow_slug => 'ls_a'"), [ids[2], ids[0]]);
  assert.deepEqual(await list("flow_slug => 'ls_a', status => 'cancelled'"), [ids[0]]);
  assert.deepEqual(await list(`run_id_prefix => '${ids[1].slice(0, 8).toUpperCase()}'`), [ids[1]]);
  assert.deepEqual(await list("since => now() + interval '1 minute'"), []);
  assert.deepEqual((await list("max_rows => 2")).length, 2);
  const [{ r: one }] = await sql`select pgflow.list_runs(flow_slug => 'ls_b') as r`;
  assert.deepEqual(Object.keys(one).sort(), [
    "cancelled_at",
    "completed_at",
    "error_message",
    "failed_at",
    "flow_slug",
    "restart_mode",
    "restart_of_run_id",
    "restarts",
    "run_id",
    "started_as",
    "started_at",
    "status",
  ]);
  await assert.rejects(sql`select pgflow.list_runs(status => 'done')`, /unknown status 'done'/);
  await assert.rejects(
    sql`select pgflow.list_runs(max_rows => 0)`,
    /max_rows must be between 1 and 1000/,
  );
  await assert.rejects(
    sql`select pgflow.list_runs(run_id_prefix => 'zz''; drop')`,
    /is not the start of a run id/,
  );
});

db.test("privileges: service_role may cancel, retry, resume and list; anon and authenticated may not", async ({ sql }) => {
  await defineFlow(sql, "pv_flow", [{ slug: "a" }]);
  const [r] = await sql`select run_id from pgflow.start_flow('pv_flow', '{}')`;
  // Its task is running when it is cancelled, so the cancel records an attempt.
  const worker = await registerWorker(sql, "pv_flow");
  const claimed = await readAndStart(sql, "pv_flow", worker, [["pv_flow", "a"]]);
  assert.deepEqual(claimed.map((c) => c.disposition), ["claimed"]);
  await ensureClientRoles(sql);
  const as = (role: string, query: string) => asRole(sql, role, query);
  for (const role of ["anon", "authenticated"]) {
    await assert.rejects(
      as(role, `select * from pgflow.cancel_run('${r.run_id}')`),
      /permission denied/,
      role,
    );
  }
  const [cancelled] = await as("service_role", `select * from pgflow.cancel_run('${r.run_id}')`);
  assert.equal(cancelled.cancelled, true);
  const [created] = await as("service_role", `select * from pgflow.retry_run('${r.run_id}')`);
  assert.equal(created.restart_mode, "retry");
  await as("service_role", `select * from pgflow.cancel_run('${created.run_id}')`);
  const [resumed] = await as(
    "service_role",
    `select * from pgflow.resume_run('${created.run_id}')`,
  );
  assert.equal(resumed.restart_mode, "resume");
  const listed = await as("service_role", `select pgflow.list_runs(flow_slug => 'pv_flow') as r`);
  assert.equal(listed.length, 3);
  // The attempt history: service_role reads it whole, the others not at all.
  const history = await as(
    "service_role",
    `select outcome from pgflow.task_attempts where run_id = '${r.run_id}'`,
  );
  assert.deepEqual(history.map((h) => h.outcome), ["cancelled"]);
  for (const role of ["anon", "authenticated"]) {
    await assert.rejects(as(role, `select * from pgflow.task_attempts`), /permission denied/, role);
  }
});

db.test("lineage: a source run lists its restarts, newest first; list_runs filters on whether a run was restarted", async ({ sql }) => {
  await defineFlow(sql, "ln_flow", [{ slug: "a" }]);
  const [src] = await sql`select run_id from pgflow.start_flow('ln_flow', '{}')`;
  const [other] = await sql`select run_id from pgflow.start_flow('ln_flow', '{}')`;
  await sql`select * from pgflow.cancel_run(${src.run_id})`;
  await sql`select * from pgflow.cancel_run(${other.run_id})`;
  const [retried] = await sql`select run_id from pgflow.retry_run(${src.run_id})`;
  const [resumed] = await sql`select run_id from pgflow.resume_run(${src.run_id})`;

  const [{ run }] = await sql`select pgflow.get_run(${src.run_id}) as run`;
  assert.deepEqual(
    run.restarts.map((r: Record<string, unknown>) => [r.run_id, r.restart_mode, r.status]),
    [[resumed.run_id, "resume", "started"], [retried.run_id, "retry", "started"]],
  );
  assert.match(run.restarts[0].started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
  const [{ run: fresh }] = await sql`select pgflow.get_run(${resumed.run_id}) as run`;
  assert.deepEqual(fresh.restarts, []);

  const list = async (restarted: boolean | null) =>
    (await sql`select pgflow.list_runs(flow_slug => 'ln_flow', status => 'cancelled',
                                       restarted => ${restarted}::boolean) as r`).map((x) => x.r);
  assert.deepEqual((await list(false)).map((r) => r.run_id), [other.run_id]);
  const [withRestarts] = await list(true);
  assert.equal(withRestarts.run_id, src.run_id);
  assert.deepEqual(withRestarts.restarts.map((r: { run_id: string }) => r.run_id), [
    resumed.run_id,
    retried.run_id,
  ]);
  assert.equal((await list(null)).length, 2);
});

db.test("again => false: a run restarted already is refused, naming its restart; racing restarts make one", async ({ sql, connect }) => {
  await defineFlow(sql, "ag_flow", [{ slug: "a" }]);
  const [src] = await sql`select run_id from pgflow.start_flow('ag_flow', '{}')`;
  await sql`select * from pgflow.cancel_run(${src.run_id})`;
  const [first] = await sql`select run_id from pgflow.resume_run(${src.run_id}, again => false)`;
  for (const fn of ["retry_run", "resume_run"]) {
    await assert.rejects(
      sql.unsafe(`select pgflow.${fn}($1, again => false)`, [src.run_id]),
      (e: { code?: string; message: string; hint?: string }) =>
        e.code === "23505" &&
        e.message.includes(`was resumed already, as run ${first.run_id}`) &&
        /again => true/.test(e.hint ?? ""),
      fn,
    );
  }
  // again => true (the default) restarts it once more.
  await sql`select pgflow.retry_run(${src.run_id})`;

  // Two restarts of one run at once: the second waits for the first and is then refused.
  const [other] = await sql`select run_id from pgflow.start_flow('ag_flow', '{}')`;
  await sql`select * from pgflow.cancel_run(${other.run_id})`;
  const a = connect();
  let second: Blocked | undefined;
  await a.begin(async (tx) => {
    await tx`select pgflow.retry_run(${other.run_id}, again => false)`;
    second = await sendBlocked(
      sql,
      connect(),
      (b) => b`select pgflow.retry_run(${other.run_id}, again => false)`,
      "the second restart",
    );
  });
  assert.equal(await second!.outcome, "23505");
  const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                            where restart_of_run_id = ${other.run_id}`;
  assert.equal(n, 1);
});
