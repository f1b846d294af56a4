/**
 * Fairness on a shared queue (docs/flow-control.md, supabase/schemas/0258_fair_window.sql): a
 * transaction that sends more than a window of tasks to a queue puts it in window mode; new tasks
 * then wait for their turn, and every claim releases as many as it took, in turn across groups.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, queueMessages } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Claimed {
  disposition: string;
  flow_slug: string | null;
  run_id: string | null;
  step_slug: string | null;
  task_index: number | null;
  attempt: number | null;
}

/** One read_and_claim of `qty` against explicit pairs, its claimed rows completed. */
async function claimAndComplete(
  sql: Sql,
  queue: string,
  worker: string,
  pairs: [string, string][],
  qty: number,
): Promise<Claimed[]> {
  const rows = await sql<Claimed[]>`
    select disposition, flow_slug, run_id, step_slug, task_index, attempt
    from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, ${qty}, 0, 50, ${
    JSON.stringify(pairs)
  }::text::jsonb)`;
  const claimed = rows.filter((r) => r.disposition === "claimed");
  for (const c of claimed) {
    await sql`select pgflow.complete_task(${c.run_id}::uuid, ${c.step_slug}, ${c.task_index}::int,
                                          '1'::jsonb, ${c.attempt}::int)`;
  }
  return claimed;
}

async function statuses(sql: Sql, flow: string): Promise<Record<string, number>> {
  const rows = await sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from pgflow.step_tasks where flow_slug = ${flow} group by status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

async function fairWindow(sql: Sql): Promise<number> {
  const [{ w }] = await sql<{ w: number }[]>`select pgflow._fair_window() as w`;
  return w;
}

/** How flow A's backlog of `n` runs is built: one transaction, or one start_flow per call. */
type BuildBacklog = (sql: Sql, flow: string, n: number) => Promise<void>;

const inOneTransaction: BuildBacklog = async (sql, flow, n) => {
  await sql`select count(pgflow.start_flow(${flow}, '{}'::jsonb)) from generate_series(1, ${n})`;
};

const onePerCall: BuildBacklog = async (sql, flow, n) => {
  for (let i = 0; i < n; i++) await sql`select pgflow.start_flow(${flow}, '{}'::jsonb)`;
};

/**
 * A's backlog of 20 windows built one way, then five of B's runs in transactions of their own: B's
 * tasks are claimed within the first window's worth of reads, not after A's backlog; everything
 * drains exactly once and the queue leaves window mode.
 */
async function newcomerGoesInTurn(sql: Sql, build: BuildBacklog, queue: string): Promise<void> {
  const w = await fairWindow(sql);
  const [fa, fb] = [`${queue}_a`, `${queue}_b`];
  await defineFlow(sql, fa, [{ slug: "s", queue }], { mode: "routed" });
  await defineFlow(sql, fb, [{ slug: "s", queue }], { mode: "routed" });
  const backlog = 20 * w;
  await build(sql, fa, backlog);
  const sent = (await queueMessages(sql, queue)).length;
  // One transaction sends its window; calls of their own send until the queue's depth passes it
  // (the call that finds it past has sent its own task already).
  assert.ok(sent >= w && sent <= w + 1, `${sent} of A's tasks were sent, a window's worth`);
  assert.deepEqual(await statuses(sql, fa), { queued: sent, waiting: backlog - sent });
  const waiting = await sql`select * from pgflow.waiting_tasks(${queue})`;
  assert.equal(waiting.length, 1);
  assert.equal(Number(waiting[0].waiting), backlog - sent);
  assert.match(waiting[0].reason, /fair share/);

  // B's runs arrive after A's backlog, each in its own transaction.
  const newcomers = new Set<string>();
  for (let i = 0; i < 5; i++) {
    const [{ run_id }] = await sql`select run_id from pgflow.start_flow(${fb}, '{}'::jsonb)`;
    newcomers.add(run_id);
  }
  assert.deepEqual(await statuses(sql, fb), { waiting: 5 });

  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [[fa, "s"], [fb, "s"]];
  let aBefore = 0;
  let aBeforeFirst: number | undefined;
  let claimedTotal = 0;
  while (newcomers.size > 0) {
    const claimed = await claimAndComplete(sql, queue, worker, pairs, 10);
    assert.ok(claimed.length > 0, "every read finds work while tasks wait");
    claimedTotal += claimed.length;
    const bs = claimed.filter((c) => c.flow_slug === fb).length;
    // Once B's turn has come, every claim carries B's next task: a claim releases before it reads
    // what its read takes, each group's n-th before any group's (n+1)-th.
    if (aBeforeFirst !== undefined) {
      assert.ok(bs > 0, "each claim after B's first carries B's next");
    }
    if (bs > 0) aBeforeFirst ??= aBefore;
    for (const c of claimed) {
      if (c.flow_slug === fb) newcomers.delete(c.run_id!);
      else if (newcomers.size > 0) aBefore++;
    }
    assert.ok(claimedTotal < backlog, "B's tasks came out before A's backlog drained");
  }
  // First in, first out would claim all of A's backlog first. In turns B's first task is read by
  // the first claim that reads past the window A sent, which it releases before that read; B's
  // other tasks follow, one turn each, in the claims after it.
  assert.ok(
    aBeforeFirst! < sent + 10,
    `${aBeforeFirst} of A's tasks were claimed before B's first`,
  );
  assert.ok(aBefore < sent + 20, `${aBefore} of A's tasks were claimed before B's last`);

  // The rest drains; every task starts exactly once and the queue leaves window mode.
  for (let i = 0; i < backlog; i++) {
    if ((await claimAndComplete(sql, queue, worker, pairs, 10)).length === 0) break;
  }
  assert.deepEqual(await statuses(sql, fa), { completed: backlog });
  assert.deepEqual(await statuses(sql, fb), { completed: 5 });
  const [{ twice }] = await sql`select count(*)::int as twice from pgflow.step_tasks
                                where queue_name = ${queue} and attempts_count <> 1`;
  assert.equal(twice, 0, "none started twice");
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.fair_windows where queue_name = ${queue}`;
  assert.equal(n, 0, "the queue left window mode");
}

db.test("another flow's backlog sent in one transaction: a newcomer's tasks are claimed within the first window", async ({ sql }) => {
  await newcomerGoesInTurn(sql, inOneTransaction, "fair_q");
});

db.test("another flow's backlog sent one start_flow per call: a newcomer's tasks are claimed within the first window", async ({ sql }) => {
  await newcomerGoesInTurn(sql, onePerCall, "fair_calls_q");
});

db.test("a shared queue whose readers keep up never enters window mode; its cursor follows the reads", async ({ sql }) => {
  const w = await fairWindow(sql);
  await defineFlow(sql, "ka", [{ slug: "s", queue: "keep_q" }], { mode: "routed" });
  await defineFlow(sql, "kb", [{ slug: "s", queue: "keep_q" }], { mode: "routed" });
  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [["ka", "s"], ["kb", "s"]];
  // Ten windows' worth of runs, one per call, read in batches of ten as they come.
  for (let i = 0; i < 10 * w; i++) {
    await sql`select pgflow.start_flow(${i % 2 ? "ka" : "kb"}, '{}'::jsonb)`;
    if (i % 10 === 9) await claimAndComplete(sql, "keep_q", worker, pairs, 10);
    const [{ n }] = await sql`select count(*)::int as n from pgflow.fair_windows`;
    assert.equal(n, 0, `in window mode after ${i + 1} runs`);
  }
  const [{ cursor, top }] = await sql`
    select c.claimed_msg_id::int as cursor, (select max(message_id)::int from pgflow.step_tasks
                                              where queue_name = 'keep_q') as top
    from pgflow.queue_cursors c where c.queue_name = 'keep_q'`;
  assert.ok(
    top - cursor < 16 + 10,
    `cursor ${cursor} lags the newest message ${top} by a step at most`,
  );
});

db.test("a flow alone on its queue never enters window mode", async ({ sql }) => {
  const w = await fairWindow(sql);
  await defineFlow(sql, "solo", [{ slug: "s", queue: "solo_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('solo', '{}'::jsonb)) from generate_series(1, ${
    w + 10
  })`;
  assert.deepEqual(await statuses(sql, "solo"), { queued: w + 10 });
  await sql`select pgflow.start_flow('solo', '{}'::jsonb) from generate_series(1, ${w + 10})`;
  const [{ c }] =
    await sql`select count(*)::int as c from pgflow.queue_cursors where queue_name = 'solo_q'`;
  assert.equal(c, 0, "a queue one flow routes to keeps no cursor");
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.fair_windows where queue_name = 'solo_q'`;
  assert.equal(n, 0);
});

/** The calls of the fairness functions `tx` has made so far (needs track_functions = 'pl'). */
async function fairnessCalls(tx: Sql): Promise<Record<string, number>> {
  const rows = await tx<{ name: string; n: number }[]>`
    select p.proname::text as name, coalesce(pg_stat_get_xact_function_calls(p.oid), 0)::int as n
    from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace
      and p.proname in ('_take_turns', '_release_turns', '_release_turn_groups')`;
  return Object.fromEntries(rows.filter((r) => r.n > 0).map((r) => [r.name, r.n]));
}

db.test("claims on a queue one flow routes to call no fairness function: full, short or empty reads", async ({ sql }) => {
  await defineFlow(sql, "plain", [{ slug: "s", queue: "plain_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('plain', '{}'::jsonb)) from generate_series(1, 15)`;
  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [["plain", "s"]];
  const rollback = new Error("rollback");
  await sql.begin(async (tx) => {
    await tx`set local track_functions = 'pl'`;
    // A full read (10 of 15), a short one (5 of 10), an empty one.
    assert.equal((await claimAndComplete(tx, "plain_q", worker, pairs, 10)).length, 10);
    assert.equal((await claimAndComplete(tx, "plain_q", worker, pairs, 10)).length, 5);
    assert.equal((await claimAndComplete(tx, "plain_q", worker, pairs, 10)).length, 0);
    assert.deepEqual(await fairnessCalls(tx), {});
    throw rollback;
  }).catch((e) => {
    if (e !== rollback) throw e;
  });
  // The same reads on a shared queue do take turns: the statistics see the calls.
  await defineFlow(sql, "shared_a", [{ slug: "s", queue: "shared_q" }], { mode: "routed" });
  await defineFlow(sql, "shared_b", [{ slug: "s", queue: "shared_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('shared_a', '{}'::jsonb)) from generate_series(1, 5)`;
  await sql.begin(async (tx) => {
    await tx`set local track_functions = 'pl'`;
    const shared: [string, string][] = [["shared_a", "s"], ["shared_b", "s"]];
    assert.equal((await claimAndComplete(tx, "shared_q", worker, shared, 10)).length, 5);
    assert.equal((await claimAndComplete(tx, "shared_q", worker, shared, 10)).length, 0);
    assert.equal((await fairnessCalls(tx))._take_turns, 2);
    throw rollback;
  }).catch((e) => {
    if (e !== rollback) throw e;
  });
});

db.test("turns go by priority, then each group's first before any group's second", async ({ sql }) => {
  const w = await fairWindow(sql);
  for (const f of ["pa", "pb", "pc"]) {
    await defineFlow(sql, f, [{ slug: "s", queue: "prio_q" }], { mode: "routed" });
  }
  await sql`select count(pgflow.start_flow('pa', '{}'::jsonb)) from generate_series(1, ${w + 20})`;
  await sql`select count(pgflow.start_flow('pb', '{}'::jsonb)) from generate_series(1, 5)`;
  const [{ run_id: urgent }] =
    await sql`select run_id from pgflow.start_flow('pc', '{}'::jsonb, priority => 10)`;
  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [["pa", "s"], ["pb", "s"], ["pc", "s"]];
  // The window pa sent is read first: a claim releases nothing before a read the visible backlog
  // fills.
  const window = await claimAndComplete(sql, "prio_q", worker, pairs, w);
  assert.deepEqual(new Set(window.map((c) => c.flow_slug)), new Set(["pa"]));
  // A claim of 4 then releases 4 before it reads them: the priority-10 task, then pa's and pb's
  // first, then a second turn (pa's, the older).
  const turns = await claimAndComplete(sql, "prio_q", worker, pairs, 4);
  assert.equal(turns[0].run_id, urgent, "the priority-10 task's message goes first");
  assert.deepEqual(turns.map((c) => c.flow_slug).sort(), ["pa", "pa", "pb", "pc"]);
});

db.test("a map larger than the window sends what fits; tick releases tasks left waiting outside window mode", async ({ sql }) => {
  const w = await fairWindow(sql);
  await defineFlow(sql, "mp", [{ slug: "m", queue: "map_q", type: "map" }], { mode: "routed" });
  await defineFlow(sql, "mp_other", [{ slug: "s", queue: "map_q" }], { mode: "routed" });
  const items = Array.from({ length: w + 10 }, (_, i) => i);
  await sql`select pgflow.start_flow('mp', ${sql.json(items)})`;
  assert.deepEqual(await statuses(sql, "mp"), { queued: w, waiting: 10 });
  const [{ el }] = await sql`select input as el from pgflow.step_tasks
                             where flow_slug = 'mp' and status = 'waiting' order by task_index limit 1`;
  assert.equal(el, w, "a waiting map task keeps its element");
  // As if the queue had left window mode while these were being parked.
  await sql`delete from pgflow.fair_windows where queue_name = 'map_q'`;
  await sql`select pgflow.tick()`;
  assert.deepEqual(await statuses(sql, "mp"), { queued: w + 10 });
});

db.test("a claim in window mode waits for the queue's turn lock, releases before it reads, and an empty read releases what it lacked", async ({ sql, connect }) => {
  const w = await fairWindow(sql);
  await defineFlow(sql, "em", [{ slug: "s", queue: "empty_q" }], { mode: "routed" });
  await defineFlow(sql, "em_other", [{ slug: "s", queue: "empty_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('em', '{}'::jsonb)) from generate_series(1, ${w + 6})`;
  // The window's messages leave without a claim (as a cancel archives them), while the estimate
  // still counts them as visible.
  await sql`select pgmq.archive('empty_q', message_id) from pgflow.step_tasks where flow_slug = 'em' and status = 'queued'`;
  await sql`update pgflow.step_tasks set status = 'cancelled' where flow_slug = 'em' and status = 'queued'`;
  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [["em", "s"]];

  // The estimate said a read's worth was visible, so the claim released nothing before its read,
  // found the queue empty, and released what it lacked after it.
  assert.equal((await claimAndComplete(sql, "empty_q", worker, pairs, 3)).length, 0);
  const [{ queued }] = await sql`
    select count(*)::int as queued from pgflow.step_tasks where flow_slug = 'em' and status = 'queued'`;
  assert.equal(queued, 3, "the empty read released a read's worth after it");
  const [{ visible }] =
    await sql`select visible from pgflow.fair_windows where queue_name = 'empty_q'`;
  assert.equal(visible, 3, "and counted them as the visible backlog");

  // Another claim holds the queue's turn lock: this one waits for it, then releases three more
  // before its read and takes all six in one read, started when it got the lock.
  const other = connect();
  const [{ held }] = await other`
    select pg_try_advisory_lock(pgflow._turn_lock_class(), hashtext('empty_q')) as held`;
  assert.equal(held, true);
  const claimer = connect();
  const [{ pid }] = await claimer<{ pid: number }[]>`select pg_backend_pid() as pid`;
  const claim = claimer<{ run_id: string }[]>`
    select run_id from pgflow.read_and_claim('empty_q', ${worker}::uuid, 30, 6, 0, 50,
                                             ${JSON.stringify(pairs)}::text::jsonb)
    where disposition = 'claimed'`.execute();
  await waitFor(async () => {
    const [{ waits }] = await sql`
      select count(*)::int as waits from pg_locks
      where pid = ${pid} and locktype = 'advisory' and not granted`;
    return waits === 1;
  }, { what: "the claim to wait for the turn lock" });
  const [{ freed }] = await other<{ freed: Date }[]>`
    select clock_timestamp() as freed, pg_advisory_unlock(pgflow._turn_lock_class(), hashtext('empty_q'))`;
  assert.equal((await claim).length, 6);
  const claimed = await sql<{ started_at: Date }[]>`
    select started_at from pgflow.step_tasks where flow_slug = 'em' and status = 'started'`;
  assert.equal(claimed.length, 6);
  for (const c of claimed) {
    assert.ok(c.started_at >= freed, `started ${c.started_at.toISOString()}, not before the wait`);
  }
});

/** Rows this transaction's scans of pgflow.step_tasks have read so far (its indexes and the table). */
async function readsOfStepTasks(tx: Sql): Promise<number> {
  const [{ n }] = await tx<{ n: number }[]>`
    select sum(pg_stat_get_xact_tuples_returned(c))::int as n
    from (select i.indexrelid::regclass::oid as c from pg_index i
          where i.indrelid = 'pgflow.step_tasks'::regclass
          union all select 'pgflow.step_tasks'::regclass::oid) x`;
  return n;
}

/**
 * Drains a map of `n` tasks on a shared queue inside the transaction that started it, in reads of
 * ten, and returns how many rows that transaction's scans of pgflow.step_tasks read: entries of
 * any of its indexes, and rows of sequential scans, so no plan hides a walk.
 */
async function turnIndexReadsForDrain(sql: Sql, n: number): Promise<number> {
  const flow = `drain_${n}`;
  await defineFlow(sql, flow, [{ slug: "each", type: "map", queue: "drain_q" }], {
    mode: "routed",
  });
  const items = Array.from({ length: n }, (_, i) => i);
  const worker = crypto.randomUUID();
  return await sql.begin(async (tx) => {
    const before = await readsOfStepTasks(tx);
    await tx`select pgflow.start_flow(${flow}, ${tx.json(items)})`;
    await tx.unsafe(`
      do $$
      declare
        r record;
        got integer;
      begin
        loop
          got := 0;
          for r in select * from pgflow.read_and_claim('drain_q', '${worker}', 30, 10, 0, 50, '[["${flow}", "each"]]')
                   where disposition = 'claimed' loop
            got := got + 1;
            perform pgflow.complete_task(r.run_id, r.step_slug, r.task_index, '1'::jsonb, r.attempt);
          end loop;
          exit when got = 0;
        end loop;
      end
      $$;`);
    const [{ status }] = await tx`select status from pgflow.runs where flow_slug = ${flow}`;
    assert.equal(status, "completed");
    return await readsOfStepTasks(tx) - before;
  });
}

db.test("a drain inside one transaction reads each waiting task's index entry a bounded number of times: linear, not quadratic", async ({ sql }) => {
  await defineFlow(sql, "drain_other", [{ slug: "s", queue: "drain_q" }], { mode: "routed" });
  const small = await turnIndexReadsForDrain(sql, 1000);
  const large = await turnIndexReadsForDrain(sql, 4000);
  // Linear: four times the tasks, about four times the rows read. Walking every released task's
  // entry again on each read of ten (quadratic) reads sixteen times as many.
  assert.ok(large < 6 * small, `1,000 tasks: ${small} rows read; 4,000 tasks: ${large}`);
  assert.ok(large < 40 * 4000, `4,000 tasks: ${large} rows read, ${large / 4000} per task`);
});

db.test("deleting one of a queue's two flows: the queue keeps no cursor, leaves window mode, and the other flow's waiting tasks go out", async ({ sql }) => {
  const w = await fairWindow(sql);
  await defineFlow(sql, "del_a", [{ slug: "s", queue: "del_q" }], { mode: "routed" });
  await defineFlow(sql, "del_b", [{ slug: "s", queue: "del_q" }], { mode: "routed" });
  const cursors = async () =>
    (await sql`select count(*)::int as n from pgflow.queue_cursors where queue_name = 'del_q'`)[0]
      .n;
  assert.equal(await cursors(), 1, "two flows route to the queue: it keeps a cursor");
  await inOneTransaction(sql, "del_a", 2 * w);
  await onePerCall(sql, "del_b", 3);
  assert.deepEqual(await statuses(sql, "del_b"), { waiting: 3 });
  await sql`select pgflow.delete_flow_and_data('del_a')`;
  assert.equal(await cursors(), 0, "one flow left: no cursor");
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.fair_windows where queue_name = 'del_q'`;
  assert.equal(n, 0, "the queue left window mode with the deleted flow");
  // B has no one left to take turns with: the deletion sent its waiting tasks, and reads (which
  // no longer look for turns on this queue) find them.
  assert.deepEqual(await statuses(sql, "del_b"), { queued: 3 });
  const worker = crypto.randomUUID();
  const pairs: [string, string][] = [["del_b", "s"]];
  let claimed = 0;
  for (let i = 0; i < 4 * w && claimed < 3; i++) {
    claimed += (await claimAndComplete(sql, "del_q", worker, pairs, 10)).length;
  }
  assert.equal(claimed, 3, "B's waiting tasks were claimed");
  // Alone now, B's new tasks are sent at once, however many.
  await inOneTransaction(sql, "del_b", 2 * w);
  assert.deepEqual(await statuses(sql, "del_b"), { completed: 3, queued: 2 * w });
});

db.test("the visible backlog a claim releasing before its read leaves: its own release unread, never below zero", async ({ sql }) => {
  await defineFlow(sql, "vb_a", [{ slug: "s", queue: "vb_q" }], { mode: "routed" });
  await defineFlow(sql, "vb_b", [{ slug: "s", queue: "vb_q" }], { mode: "routed" });
  await sql`insert into pgflow.fair_windows (queue_name, visible) values ('vb_q', 7)`;
  // After a release of 5 messages (ids 100-104) from a backlog estimated at 12, a read of 10 whose
  // highest id is `top` (depth 10), as pgflow._take_turns sees it in the claim's transaction.
  const after = (top: number, read = 10) =>
    sql.begin(async (tx) => {
      await tx`select set_config('pgflow.turn_before', 'vb_q' || chr(31) || '12' || chr(31) || '5', true),
                      set_config('pgflow.turn_ids', '100 104', true)`;
      await tx`select pgflow._take_turns('vb_q', -10, ${read}::int, 10, ${top}::bigint)`;
      const [{ visible }] =
        await tx`select visible from pgflow.fair_windows where queue_name = 'vb_q'`;
      return visible;
    });
  assert.equal(await after(102), 2, "read into its own release: the two ids past it are left");
  assert.equal(await after(104), 0, "read all of its own release");
  assert.equal(await after(130), 0, "read past its own release (another's later message)");
  assert.equal(await after(90), 12 + 5 - 10, "did not reach it: estimate + released - read");
  assert.equal(await after(90, 4), 0, "a short read left nothing visible (and nothing waits)");
});
