/**
 * A queue that autovacuum analysed while it was drained has statistics that say it holds no rows
 * however far it grows, and PGMQ's read, planned on them, walks the queue's whole index for every
 * read of a burst. read_and_claim notices a full read that was slow, and the queue table is
 * analysed once (0405_queue_statistics.sql). Counted with the transaction's own table statistics
 * (pg_stat_xact_user_tables), which do not depend on timing.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Stats {
  reltuples: number;
  relpages: number;
  analyzed: string | null;
}

async function queueStats(sql: Sql, queue: string): Promise<Stats> {
  const [row] = await sql<Stats[]>`
    select c.reltuples::float8 as reltuples, c.relpages,
           greatest(pg_stat_get_last_analyze_time(c.oid),
                    pg_stat_get_last_autoanalyze_time(c.oid))::text as analyzed
    from pg_class c where c.oid = ${`pgmq.q_${queue}`}::regclass`;
  return row;
}

/** A queue that had `warm` messages, all archived, then analysed: pages, no live rows. */
async function drainedAndAnalysed(sql: Sql, queue: string, warm: number): Promise<void> {
  await defineFlow(sql, `${queue}_flow`, [{ slug: "a", queue }], { mode: "routed" });
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[${warm}::int]))`;
  await sql.unsafe(`select count(*) from pgmq.archive('${queue}',
    array(select msg_id from pgmq.q_${queue}))`);
  await sql.unsafe(`analyze pgmq.q_${queue}`);
  const s = await queueStats(sql, queue);
  assert.equal(s.reltuples, 0);
  assert.ok(s.relpages > 0, `the drained queue kept ${s.relpages} pages`);
}

/** Rows of the queue table one read_and_claim touched, in a transaction of its own. */
async function readTouches(sql: Sql, queue: string, worker: string, qty: number) {
  return await sql.begin(async (tx) => {
    const touched = async () => {
      const [r] = await tx<{ n: number }[]>`
        select coalesce(seq_tup_read, 0)::int + coalesce(idx_tup_fetch, 0)::int as n
        from pg_stat_xact_user_tables where schemaname = 'pgmq' and relname = ${`q_${queue}`}`;
      return r?.n ?? 0;
    };
    const before = await touched();
    const rows =
      await tx`select msg_id from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, ${qty}, 0)`;
    return { rows: rows.length, touched: (await touched()) - before };
  });
}

db.test("a burst on a queue analysed empty: one read analyses it, and the next read walks only its batch", async ({ sql }) => {
  const queue = "qs_burst";
  await drainedAndAnalysed(sql, queue, 3000);
  const worker = await registerWorker(sql, queue);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[30000]))`;
  // Analysed a second ago at most is analysed recently enough (a refresh is once a second).
  await sql`select pg_sleep(1.1)`;

  const first = await readTouches(sql, queue, worker, 10);
  assert.equal(first.rows, 10);
  const after = await queueStats(sql, queue);
  assert.ok(after.reltuples > 20_000, `the queue's statistics now count ${after.reltuples} rows`);

  for (let round = 0; round < 3; round++) {
    const next = await readTouches(sql, queue, worker, 10);
    assert.equal(next.rows, 10);
    // The read's index scan passes the messages read before (hidden) and takes 10; the update
    // finds each by its key. Planned on "empty", it walked all 30,000 for each read.
    assert.ok(next.touched <= 200, `round ${round}: the read touched ${next.touched} queue rows`);
  }
});

db.test("statistics that are right are left alone", async ({ sql }) => {
  const queue = "qs_right";
  await drainedAndAnalysed(sql, queue, 3000);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[20000]))`;
  await sql.unsafe(`analyze pgmq.q_${queue}`);
  const analysed = (await queueStats(sql, queue)).analyzed;
  await sql`select pg_sleep(1.1)`;
  const [{ done }] = await sql`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
  assert.equal(done, false);
  assert.equal((await queueStats(sql, queue)).analyzed, analysed);
  // Believed in fewer rows than were read: analysed, and then not again within the second.
  const [{ stale }] = await sql`select pgflow._refresh_queue_statistics(${queue}, 50000) as stale`;
  assert.equal(stale, true);
  const [{ again }] = await sql`select pgflow._refresh_queue_statistics(${queue}, 50000) as again`;
  assert.equal(again, false);
});

db.test("the refresh never waits and never runs without the right", async ({ sql, connect }) => {
  const queue = "qs_rights";
  await drainedAndAnalysed(sql, queue, 3000);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[10000]))`;
  await sql`select pg_sleep(1.1)`;

  // A role that may call it but does not own the table: skipped, no warning, nothing analysed.
  const role = "qs_not_owner";
  await sql.unsafe(`drop role if exists ${role}`);
  await sql.unsafe(`create role ${role}`);
  await sql.unsafe(`grant usage on schema pgflow, pgmq to ${role}`);
  await sql.unsafe(
    `grant execute on function pgflow._refresh_queue_statistics(text, integer) to ${role}`,
  );
  const other = connect();
  const warnings: string[] = [];
  const watched = connect({ onnotice: (n) => warnings.push(String(n.message)) });
  const notOwner = await watched.begin(async (tx) => {
    await tx.unsafe(`set local role ${role}`);
    const [{ done }] = await tx`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
    return done;
  });
  assert.equal(notOwner, false);
  assert.deepEqual(warnings, []);
  assert.equal((await queueStats(sql, queue)).reltuples, 0);

  // The table's lock held (as autovacuum holds it) until the refresh returns: skipped. A refresh
  // that waited for the lock would wait for its holder, which waits for it: the lock timeout
  // turns that into an error instead of a hang.
  const done = await other.begin(async (tx) => {
    await tx.unsafe(`lock table pgmq.q_${queue} in share update exclusive mode`);
    return await sql.begin(async (caller) => {
      await caller`set local lock_timeout = '30s'`;
      const [row] = await caller`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
      return row.done;
    });
  });
  assert.equal(done, false);

  // Free, stale and allowed: analysed.
  const [{ done: now }] = await sql`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
  assert.equal(now, true);
  assert.ok((await queueStats(sql, queue)).reltuples > 8000);
  await sql.unsafe(`drop owned by ${role}; drop role ${role}`);
});

db.test("workers that meet stale statistics together: one analyses, none waits", async ({ sql, connect }) => {
  const queue = "qs_together";
  await drainedAndAnalysed(sql, queue, 3000);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[10000]))`;
  await sql`select pg_sleep(1.1)`;
  const workers = Array.from({ length: 4 }, () => connect());
  // Each in a transaction held open until every call has returned, as a worker's read transaction
  // is held past the others' calls: a call that waited for another's lock would wait for a
  // transaction that waits for it, which the lock timeout turns into an error instead of a hang.
  let returned = 0;
  let allReturned!: () => void;
  const barrier = new Promise<void>((resolve) => (allReturned = resolve));
  const results = await Promise.all(workers.map((w) =>
    w.begin(async (tx) => {
      await tx`set local lock_timeout = '30s'`;
      const [{ done }] = await tx`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
      if (++returned === workers.length) allReturned();
      await barrier;
      return done as boolean;
    })
  ));
  assert.equal(results.filter((done) => done).length, 1, JSON.stringify(results));
});

db.test("a small queue is left to autovacuum, whatever its statistics say", async ({ sql }) => {
  const queue = "qs_small";
  // Analysed empty, then a trickle: fewer than 64 pages, which a read walks in well under 1 ms.
  await drainedAndAnalysed(sql, queue, 3000);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[500]))`;
  await sql`select pg_sleep(1.1)`;
  const [{ done }] = await sql`select pgflow._refresh_queue_statistics(${queue}, 10) as done`;
  assert.equal(done, false);
  assert.equal((await queueStats(sql, queue)).reltuples, 0);
});

db.test("an error of ANALYZE's own does not fail the read", async ({ sql }) => {
  // A table where a queue's would be, without PGMQ's vt column: `analyze (msg_id, vt)` fails.
  await sql.unsafe(`create table pgmq.q_qs_odd (msg_id bigint primary key, pad text)`);
  const fill = `insert into pgmq.q_qs_odd
    select g, repeat('x', 200) from generate_series(1, 3000) g`;
  await sql.unsafe(fill);
  await sql.unsafe(`delete from pgmq.q_qs_odd`);
  await sql.unsafe(`analyze pgmq.q_qs_odd`);
  await sql.unsafe(fill.replace("1, 3000", "3001, 6000"));
  await sql`select pg_sleep(1.1)`;
  const [{ done }] = await sql`select pgflow._refresh_queue_statistics('qs_odd', 10) as done`;
  assert.equal(done, false);
  await sql.unsafe(`drop table pgmq.q_qs_odd`);
});
