/**
 * Lock order of fairness on a shared queue (supabase/schemas/0258_fair_window.sql): a claim that
 * finds nothing waiting for a turn takes its queue out of window mode without waiting for another
 * claim doing the same, so two claims on one queue cannot deadlock there.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

/** The backend pid of a one-connection client. */
async function pid(conn: Sql): Promise<number> {
  const [{ p }] = await conn<{ p: number }[]>`select pg_backend_pid() as p`;
  return p;
}

/** Whether backend `p` is waiting for a lock. */
async function waitingForLock(sql: Sql, p: number): Promise<boolean> {
  const [{ w }] = await sql<{ w: boolean }[]>`
    select coalesce(bool_or(wait_event_type = 'Lock'), false) as w
    from pg_stat_activity where pid = ${p}`;
  return w;
}

/**
 * Runs `body` with the fairness window redefined to `window` (`pgflow._fair_window()` is a
 * constant function), restoring the schema's definition after.
 */
async function withWindow(sql: Sql, window: number, body: () => Promise<void>): Promise<void> {
  const [{ definition }] = await sql<{ definition: string }[]>`
    select pg_get_functiondef('pgflow._fair_window()'::regprocedure) as definition`;
  await sql.unsafe(definition.replace(/select 32/, `select ${window}`));
  try {
    await body();
  } finally {
    await sql.unsafe(definition);
  }
}

/** Waits for every one of `work` and fails naming the first that failed. */
async function allFulfilled(work: Promise<unknown>[]): Promise<void> {
  for (const r of await Promise.allSettled(work)) {
    assert.equal(r.status, "fulfilled", String((r as PromiseRejectedResult).reason));
  }
}

/** SQLSTATE of a failed query, if any. */
function sqlState(r: PromiseSettledResult<unknown>): string | undefined {
  return r.status === "rejected" ? (r.reason as { code?: string }).code : undefined;
}

// Stepped by hand, in the order that deadlocked under load (bench/fairness.ts --windows 8): claim
// c1 leaves window mode (deletes the queue's fair_windows row) before its read; claim c2 holds the
// row lock of a queued task whose message is visible (what a release's FOR UPDATE leaves on a
// task another claim released and committed since its snapshot) and leaves window mode too; c1
// then reads that task's message and claims it. Waiting for c1's delete closed the cycle.
db.test("two claims leaving window mode at once do not deadlock; the task is claimed once", async ({ sql, connect }) => {
  const queue = "fair_lock_q";
  await defineFlow(sql, "lock_a", [{ slug: "s", queue }], { mode: "routed" });
  await defineFlow(sql, "lock_b", [{ slug: "s", queue }], { mode: "routed" });
  const [{ run_id }] = await sql`select run_id from pgflow.start_flow('lock_a', '{}'::jsonb)`;
  const [{ mid }] = await sql`select message_id::int as mid from pgflow.step_tasks
                              where run_id = ${run_id}::uuid and status = 'queued'`;
  assert.ok(mid, "the task was sent, not parked");
  // In window mode with nothing waiting: the next release takes the queue out of it.
  await sql`insert into pgflow.fair_windows (queue_name) values (${queue})`;

  const c1 = connect();
  const c2 = connect();
  const [p1, p2] = [await pid(c1), await pid(c2)];
  await c1`begin`;
  await c2`begin`;
  // Whichever of the two Postgres picks as the victim, the other must not wait forever.
  await c1`set local deadlock_timeout = '10ms'`;
  await c2`set local deadlock_timeout = '10ms'`;
  await c1`select pgflow._release_turns(${queue}, 1)`;
  assert.equal(
    (await sql`select 1 from pgflow.fair_windows where queue_name = ${queue}`).length,
    1,
    "c1's delete is not committed yet",
  );
  await c2`select 1 from pgflow.step_tasks where run_id = ${run_id}::uuid for update`;
  const c2Release = c2`select pgflow._release_turns(${queue}, 1) as n`.execute();
  // Either it returns or it waits for c1 (as it did before the fix): go on once one is true.
  let c2Done = false;
  c2Release.then(() => (c2Done = true), () => (c2Done = true));
  await waitFor(async () => c2Done || await waitingForLock(sql, p2), {
    what: "c2's release to return or wait for a lock",
  });
  const worker = crypto.randomUUID();
  const c1Claim = c1<{ disposition: string; run_id: string }[]>`
    select disposition, run_id from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, 10, 0, 50,
      ${JSON.stringify([["lock_a", "s"], ["lock_b", "s"]])}::text::jsonb)`.execute();
  // Settled below; marked handled now, since it may fail while the test waits on something else.
  c1Claim.catch(() => {});
  await waitFor(async () => await waitingForLock(sql, p1) || c2Done, {
    what: "c1's claim to wait for c2's row lock",
  });
  const [r2] = await Promise.allSettled([c2Release]);
  if (r2.status === "fulfilled") await c2`commit`;
  const [r1] = await Promise.allSettled([c1Claim]);
  if (r1.status === "fulfilled") await c1`commit`;
  else await c1`rollback`;
  if (r2.status === "rejected") await c2`rollback`;

  assert.notEqual(sqlState(r2), "40P01", "c2's release deadlocked with c1's claim");
  assert.notEqual(sqlState(r1), "40P01", "c1's claim deadlocked with c2's release");
  assert.equal(r1.status, "fulfilled", String((r1 as PromiseRejectedResult).reason));
  assert.equal(r2.status, "fulfilled", String((r2 as PromiseRejectedResult).reason));
  const claimed = (await c1Claim).filter((r) => r.disposition === "claimed");
  assert.deepEqual(claimed.map((r) => r.run_id), [run_id], "the task claimed once, by c1");
  const [{ n, attempts }] = await sql`
    select (select count(*)::int from pgflow.fair_windows where queue_name = ${queue}) as n,
           (select attempts_count from pgflow.step_tasks where run_id = ${run_id}::uuid) as attempts`;
  assert.equal(n, 0, "the queue left window mode");
  assert.equal(attempts, 1);
});

// Under load: a shared queue in window mode with a window smaller than a read (as
// bench/fairness.ts --windows 8 runs it; each claim waits for the queue's turn lock and releases
// before it reads), new runs started one per call on one connection while three claimers drain on
// three others. Every task is claimed exactly once and completed, no claim or start fails (a
// deadlock is SQLSTATE 40P01), and the queue leaves window mode.
db.test("starts and claims racing on a queue in window mode: no deadlock, nothing lost or claimed twice", async ({ sql, connect }) => {
  const queue = "fair_race_q";
  const window = 8;
  await defineFlow(sql, "race_a", [{ slug: "s", queue }], { mode: "routed" });
  await defineFlow(sql, "race_b", [{ slug: "s", queue }], { mode: "routed" });
  await withWindow(sql, window, async () => {
    const backlog = 40 * window;
    const arrivals = 120;
    await sql`select count(pgflow.start_flow('race_a', '{}'::jsonb)) from generate_series(1, ${backlog})`;
    const pairs = JSON.stringify([["race_a", "s"], ["race_b", "s"]]);
    const total = backlog + arrivals;
    let started = 0;
    const starter = connect();
    const starts = (async () => {
      for (; started < arrivals; started++) {
        await starter`select pgflow.start_flow(${started % 2 ? "race_a" : "race_b"}, '{}'::jsonb)`;
      }
    })();
    const claimer = async (conn: Sql) => {
      const worker = crypto.randomUUID();
      for (let idle = 0; idle < 50;) {
        const [{ done }] = await conn<{ done: number }[]>`
          select count(*)::int as done from pgflow.step_tasks
          where queue_name = ${queue} and status = 'completed'`;
        if (done === total) return;
        const rows = await conn<{ disposition: string; run_id: string; attempt: number }[]>`
          select disposition, run_id, attempt from pgflow.read_and_claim(${queue}, ${worker}::uuid,
            30, 10, 0, 50, ${pairs}::text::jsonb)`;
        const claimed = rows.filter((r) => r.disposition === "claimed");
        idle = claimed.length === 0 && started >= arrivals ? idle + 1 : 0;
        for (const c of claimed) {
          await conn`select pgflow.complete_task(${c.run_id}::uuid, 's', 0, '1'::jsonb,
                                                 ${c.attempt}::int)`;
        }
      }
    };
    await allFulfilled([
      starts,
      claimer(connect()),
      claimer(connect()),
      claimer(connect()),
    ]);
    const [{ completed, other, twice, windows }] = await sql`
      select count(*) filter (where status = 'completed')::int as completed,
             count(*) filter (where status <> 'completed')::int as other,
             count(*) filter (where attempts_count <> 1)::int as twice,
             (select count(*)::int from pgflow.fair_windows where queue_name = ${queue}) as windows
      from pgflow.step_tasks where queue_name = ${queue}`;
    assert.equal(completed, total, "every task completed");
    assert.equal(other, 0);
    assert.equal(twice, 0, "none claimed twice");
    assert.equal(windows, 0, "the queue left window mode");
  });
});

/** The lock types backend `p` waits for (not yet granted). */
async function awaitedLocks(sql: Sql, p: number): Promise<string[]> {
  const rows = await sql<{ locktype: string }[]>`
    select locktype from pg_locks where pid = ${p} and not granted`;
  return rows.map((r) => r.locktype);
}

// complete_and_claim does its completions before it waits for the queue's turn lock, so claims in
// window mode take turns only for their release, read and claim. Safe only because the holder never
// waits for a row such a claim holds: stepped by hand where it could, a holder that has read a
// run's task (and holds its message) and a completion that fails that run (cancelling the task).
// The completion archives the run's messages before it cancels their tasks, so it waits for the
// holder's read; the holder then claims the task without waiting, commits, and the completion goes
// on. Had the completion cancelled the task first, the holder's claim would wait for it while it
// waited for the holder's message: a deadlock (SQLSTATE 40P01).
db.test("a completion that fails a run while the turn lock's holder has read its task: no deadlock", async ({ sql, connect }) => {
  const queue = "fair_fail_q";
  await defineFlow(sql, "fail_a", [
    { slug: "s", queue },
    { slug: "t", queue },
    { slug: "m", deps: ["s"], type: "map", queue },
  ], { mode: "routed" });
  await defineFlow(sql, "fail_b", [{ slug: "s", queue }], { mode: "routed" });
  const pairs = JSON.stringify([["fail_a", "s"], ["fail_a", "t"], ["fail_a", "m"], [
    "fail_b",
    "s",
  ]]);
  const [{ run_id }] = await sql`select run_id from pgflow.start_flow('fail_a', '{}'::jsonb)`;
  const tasks = await sql<{ step_slug: string; mid: string }[]>`
    select step_slug, message_id::text as mid from pgflow.step_tasks
    where run_id = ${run_id}::uuid order by step_slug`;
  assert.deepEqual(tasks.map((t) => t.step_slug), ["s", "t"]);
  const [mS, mT] = tasks.map((t) => t.mid);
  const completer = crypto.randomUUID();
  const [s] = await sql<{ attempt: number }[]>`
    select attempt from pgflow.start_tasks(${queue}, ${[mS]}::bigint[], ${completer}::uuid,
      ${pairs}::text::jsonb)`;
  assert.equal(s.attempt, 1);
  await sql`insert into pgflow.fair_windows (queue_name) values (${queue})`;

  const holder = connect();
  const claimer = connect();
  const pc = await pid(claimer);
  await holder`begin`;
  await holder`set local deadlock_timeout = '10ms'`;
  await holder`select pg_advisory_xact_lock(pgflow._turn_lock_class(), hashtext(${queue}))`;
  const read = await holder<
    { mid: string }[]
  >`select msg_id::text as mid from pgmq.read(${queue}, 30, 10)`;
  assert.deepEqual(read.map((r) => r.mid), [mT], "the holder read t's message (s is started)");

  // s completes with an output m cannot map over: the run fails, t is cancelled.
  await claimer`set deadlock_timeout = '10ms'`;
  const completion = claimer<{ disposition: string }[]>`
    select disposition from pgflow.complete_and_claim(${[run_id]}::uuid[], ${["s"]}::text[],
      ${[0]}::integer[], ${['"not an array"']}::text[]::jsonb[], ${[1]}::integer[], ${queue},
      ${completer}::uuid, 30, 10, ${pairs}::text::jsonb)`.execute();
  completion.catch(() => {});
  await waitFor(async () => (await awaitedLocks(sql, pc)).length > 0, {
    what: "the completion to wait for a lock",
  });
  assert.deepEqual(
    await awaitedLocks(sql, pc),
    ["transactionid"],
    "the completion waits for the holder's message, not for the turn lock",
  );
  const claimed = await holder<{ disposition: string }[]>`
    select disposition from pgflow.start_tasks(${queue}, ${[
    mT,
  ]}::bigint[], ${crypto.randomUUID()}::uuid,
      ${pairs}::text::jsonb)`;
  assert.deepEqual(claimed.map((c) => c.disposition), ["claimed"]);
  await holder`commit`;
  const [r] = await Promise.allSettled([completion]);
  assert.equal(r.status, "fulfilled", String((r as PromiseRejectedResult).reason));
  const [{ run, t }] = await sql`
    select (select status from pgflow.runs where run_id = ${run_id}::uuid) as run,
           (select status from pgflow.step_tasks where run_id = ${run_id}::uuid and step_slug = 't') as t`;
  assert.equal(run, "failed");
  assert.equal(t, "cancelled", "t, claimed by the holder, cancelled once the holder committed");
});

// Under load: three workers' loops of complete_and_claim (their completions, then their next read)
// on a queue in window mode with a window of 8, where half the runs fail when their step s
// completes, cancelling their step t wherever it is (waiting, queued, read by another claim), and a
// second flow's runs start meanwhile. No call fails (a deadlock is SQLSTATE 40P01), nothing is
// claimed twice, every run ends, and the queue leaves window mode.
db.test("complete_and_claim loops with failing runs on a queue in window mode: no deadlock, every run ends", async ({ sql, connect }) => {
  const queue = "fair_cc_q";
  const window = 8;
  await defineFlow(sql, "cc_a", [
    { slug: "s", queue },
    { slug: "t", queue },
    { slug: "m", deps: ["s"], type: "map", queue },
  ], { mode: "routed", maxAttempts: 1 });
  await defineFlow(sql, "cc_b", [{ slug: "s", queue }], { mode: "routed" });
  await withWindow(sql, window, async () => {
    const backlog = 30 * window;
    const arrivals = 80;
    await sql`select count(pgflow.start_flow('cc_a', jsonb_build_object('i', i)))
              from generate_series(1, ${backlog}) i`;
    const [{ windows: before }] = await sql`
      select count(*)::int as windows from pgflow.fair_windows where queue_name = ${queue}`;
    assert.equal(before, 1, "the backlog put the queue in window mode");
    const failing = new Set(
      (await sql<{ run_id: string }[]>`
        select run_id from pgflow.runs where flow_slug = 'cc_a' and (input ->> 'i')::int % 2 = 1`)
        .map((r) => r.run_id),
    );
    const pairs = JSON.stringify([["cc_a", "s"], ["cc_a", "t"], ["cc_a", "m"], ["cc_b", "s"]]);
    let started = 0;
    const starter = connect();
    const starts = (async () => {
      for (; started < arrivals; started++) {
        await starter`select pgflow.start_flow('cc_b', '{}'::jsonb)`;
      }
    })();
    type Claimed = {
      disposition: string;
      run_id: string;
      step_slug: string;
      task_index: number;
      attempt: number;
    };
    const loop = async (conn: Sql) => {
      const worker = crypto.randomUUID();
      await conn`set deadlock_timeout = '10ms'`;
      let done: Claimed[] = [];
      for (let idle = 0; idle < 50;) {
        // s of a failing run gives m no array to map over; every other output is an empty array.
        const outputs = done.map((d) =>
          d.step_slug === "s" && failing.has(d.run_id) ? '"x"' : "[]"
        );
        const rows = await conn<Claimed[]>`
          select disposition, run_id, step_slug, task_index, attempt
          from pgflow.complete_and_claim(${done.map((d) => d.run_id)}::uuid[],
            ${done.map((d) => d.step_slug)}::text[], ${done.map((d) => d.task_index)}::integer[],
            ${outputs}::text[]::jsonb[], ${done.map((d) => d.attempt)}::integer[], ${queue},
            ${worker}::uuid, 30, 4, ${pairs}::text::jsonb)`;
        done = rows.filter((r) => r.disposition === "claimed");
        const [{ open }] = await conn<{ open: number }[]>`
          select count(*)::int as open from pgflow.step_tasks
          where queue_name = ${queue} and status in ('waiting', 'queued', 'started')`;
        idle = done.length === 0 && open === 0 && started >= arrivals ? idle + 1 : 0;
      }
    };
    await allFulfilled([
      starts,
      loop(connect()),
      loop(connect()),
      loop(connect()),
    ]);
    const [{ failed, completed, other, twice, windows }] = await sql`
      select count(*) filter (where r.status = 'failed')::int as failed,
             count(*) filter (where r.status = 'completed')::int as completed,
             count(*) filter (where r.status not in ('failed', 'completed'))::int as other,
             (select count(*)::int from pgflow.step_tasks t
              where t.queue_name = ${queue} and t.attempts_count > 1) as twice,
             (select count(*)::int from pgflow.fair_windows w where w.queue_name = ${queue}) as windows
      from pgflow.runs r where r.flow_slug in ('cc_a', 'cc_b')`;
    assert.equal(other, 0, "every run ended");
    assert.equal(failed, backlog / 2, "the runs whose s gave m no array failed");
    assert.equal(completed, backlog / 2 + arrivals);
    assert.equal(twice, 0, "none claimed twice");
    assert.equal(windows, 0, "the queue left window mode");
  });
});
