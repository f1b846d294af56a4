// Reading: read, conditional reads, read_with_poll.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { BEFORE_15, freshQueue, pgError, sortedIds } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

/**
 * Runs a read (`call`: a set-returning `pgmq.read…(…)` call) and returns the ids it read, when it
 * began and when it returned, by the server's clock within the one statement: a busy machine
 * delays the client and the network far more than it delays a read's own waits.
 */
async function timedRead(
  sql: postgres.Sql,
  call: postgres.PendingQuery<postgres.Row[]>,
): Promise<{ ids: number[]; began: Date; ended: Date; ms: number }> {
  // LATERAL: the read runs after `began` is taken; `ended` is read after the read returned.
  const [row] = await sql`
    select r.ids, a.began, clock_timestamp() as ended,
           extract(epoch from clock_timestamp() - a.began)::float8 * 1000 as ms
    from (select clock_timestamp() as began) a
    cross join lateral (
      select coalesce(array_agg(m.msg_id order by m.msg_id), '{}') as ids, a.began as after
      from ${call} m) r`;
  return { ids: row.ids.map(Number), began: row.began, ended: row.ended, ms: row.ms };
}

async function queueWith(sql: postgres.Sql, prefix: string, count: number): Promise<string> {
  const q = freshQueue(prefix);
  await sql`select pgmq.create(${q}::text)`;
  for (let i = 1; i <= count; i++) {
    await sql`select pgmq.send(${q}::text, ${sql.json({ i })}::jsonb)`;
  }
  return q;
}

db.test("25 [all] read takes up to qty visible messages and hides them for vt", async ({ sql }) => {
  const q = await queueWith(sql, "t_read", 3);
  const first = await sql`
    select *, vt between clock_timestamp() + interval '28 seconds'
                     and clock_timestamp() + interval '31 seconds' as vt_ok
    from pgmq.read(${q}::text, 30, 2)`;
  assert.deepEqual(sortedIds(first), [1, 2]);
  for (const row of first) {
    assert.equal(row.read_ct, 1);
    assert.equal(row.vt_ok, true);
    assert.deepEqual(row.message, { i: Number(row.msg_id) });
  }
  const second = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.deepEqual(sortedIds(second), [3]);
  const third = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.equal(third.length, 0);
});

db.test("26 [all] read with vt 0 returns the same message again, counting reads", async ({ sql }) => {
  const q = await queueWith(sql, "t_reread", 1);
  const [a] = await sql`select * from pgmq.read(${q}::text, 0, 1)`;
  const [b] = await sql`select * from pgmq.read(${q}::text, 0, 1)`;
  assert.equal(a.msg_id, b.msg_id);
  assert.deepEqual([a.read_ct, b.read_ct], [1, 2]);
});

db.test("27 [all] qty 0 reads nothing, NULL reads all, negative fails", async ({ sql }) => {
  const q = await queueWith(sql, "t_qty", 3);
  assert.equal((await sql`select * from pgmq.read(${q}::text, 0, 0)`).length, 0);
  const all = await sql`select * from pgmq.read(${q}::text, 0, null::integer)`;
  assert.deepEqual(sortedIds(all), [1, 2, 3]);
  await assert.rejects(
    () => sql`select * from pgmq.read(${q}::text, 0, -1)`,
    pgError("2201W", /LIMIT must not be negative/),
  );
});

db.test("[all] read picks the lowest visible ids first", async ({ sql }) => {
  const q = await queueWith(sql, "t_fifo", 5);
  assert.deepEqual(sortedIds(await sql`select * from pgmq.read(${q}::text, 30, 2)`), [1, 2]);
  assert.deepEqual(sortedIds(await sql`select * from pgmq.read(${q}::text, 30, 2)`), [3, 4]);
});

db.test("[all] a message sent earlier in the same transaction is readable", async ({ connect }) => {
  const a = connect();
  const q = freshQueue("t_sametx");
  await a`select pgmq.create(${q}::text)`;
  await a`begin`;
  await a`select pgmq.send(${q}::text, '{}'::jsonb)`;
  const rows = await a`select * from pgmq.read(${q}::text, 30, 1)`;
  await a`commit`;
  assert.deepEqual(sortedIds(rows), [1]);
});

db.test("28 [1.5] a conditional read filters with jsonb containment", async ({ sql }) => {
  const q = freshQueue("t_cond");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select pgmq.send(${q}::text, '{"type":"x"}'::jsonb)`;
  const [{ y }] = await sql`select pgmq.send(${q}::text, '{"type":"y"}'::jsonb) as y`;
  await sql`select pgmq.send(${q}::text, null::jsonb)`;
  const only = await sql`select * from pgmq.read(${q}::text, 0, 10, '{"type":"y"}'::jsonb)`;
  assert.deepEqual(only.map((r) => r.msg_id), [y]);
  const named = await sql`
    select * from pgmq.read(${q}::text, 0, 10, conditional => '{"type":"y"}'::jsonb)`;
  assert.deepEqual(named.map((r) => r.msg_id), [y]);
  const empty = await sql`select * from pgmq.read(${q}::text, 0, 10, '{}'::jsonb)`;
  assert.deepEqual(sortedIds(empty), [1, 2, 3]);
  const nul = await sql`select * from pgmq.read(${q}::text, 0, 10, null::jsonb)`;
  assert.deepEqual(sortedIds(nul), [1, 2, 3]);
  const none = await sql`select * from pgmq.read(${q}::text, 0, 10, '{"type":"z"}'::jsonb)`;
  assert.equal(none.length, 0);
  const polled = await sql`
    select * from pgmq.read_with_poll(${q}::text, 0, 10, 1, 100, '{"type":"x"}'::jsonb)`;
  assert.deepEqual(sortedIds(polled), [1]);
}, { ignore: BEFORE_15 });

db.test("29 [all] read_with_poll on an empty queue waits about max_poll_seconds", async ({ sql }) => {
  const q = await queueWith(sql, "t_poll_empty", 0);
  const read = await timedRead(sql, sql`pgmq.read_with_poll(${q}::text, 30, 1, 1, 100)`);
  assert.deepEqual(read.ids, []);
  assert.ok(read.ms >= 900 && read.ms <= 2000, `took ${read.ms} ms`);
});

db.test("30 [all] read_with_poll returns a delayed message once it becomes visible", async ({ sql }) => {
  const q = await queueWith(sql, "t_poll_delay", 0);
  const [{ id, sent }] =
    await sql`select pgmq.send(${q}::text, '{}'::jsonb, 2) as id, clock_timestamp() as sent`;
  const read = await timedRead(sql, sql`pgmq.read_with_poll(${q}::text, 30, 1, 6, 100)`);
  assert.deepEqual(read.ids, [Number(id)]);
  // Visible 2 s after the send; returned long before the 6 s the read would wait for nothing.
  const ms = read.ended.getTime() - sent.getTime();
  assert.ok(ms >= 1900 && read.ms < 5000, `returned ${ms} ms after the send, ${read.ms} ms in`);
});

db.test("[all] read_with_poll sees a message committed by another session while it waits", async ({ sql, connect }) => {
  const q = await queueWith(sql, "t_poll_commit", 0);
  const writer = connect();
  const poller = connect({ connection: { application_name: "t_poll_commit_poller" } });
  // Sent now, not when awaited (postgres.js queries are lazy): otherwise the read would begin
  // after the send, and find the message without waiting.
  const polling = poller`
    select *, clock_timestamp() as got_at from pgmq.read_with_poll(${q}::text, 30, 1, 60, 50)`
    .execute();
  let returned = false;
  polling.then(() => (returned = true), () => (returned = true));
  await waitFor(
    async () =>
      returned ||
      (await sql`select 1 from pg_stat_activity
                 where application_name = 't_poll_commit_poller' and state = 'active'
                   and query like '%read_with_poll%'`).length > 0,
    { what: "read_with_poll to wait on the server" },
  );
  assert.equal(returned, false, "read_with_poll returned before anything was sent");
  const [{ sent_at }] = await writer`
    select clock_timestamp() as sent_at, pgmq.send(${q}::text, '{"late":true}'::jsonb)`;
  const rows = await polling;
  assert.equal(rows.length, 1);
  assert.deepEqual(rows[0].message, { late: true });
  assert.ok(rows[0].got_at >= sent_at, "read while waiting, after the send");
});

db.test("[all] read_with_poll sleeps the poll interval between attempts", async ({ sql }) => {
  // The message becomes visible 3 s after sending. The read begins before that (it is the next
  // statement), so its attempts come at 0 s and 4 s: a poller that really sleeps returns 4 s
  // after it began; a busy loop (PGMQ 1.4.4's bug) would return at the 3 s mark, sooner.
  const q = await queueWith(sql, "t_poll_sleep", 0);
  const [{ sent }] =
    await sql`select clock_timestamp() as sent from pgmq.send(${q}::text, '{}'::jsonb, 3)`;
  const read = await timedRead(sql, sql`pgmq.read_with_poll(${q}::text, 30, 1, 10, 4000)`);
  assert.equal(read.ids.length, 1);
  assert.ok(read.began.getTime() - sent.getTime() < 3000, "the read began before it was visible");
  assert.ok(read.ms >= 3900 && read.ms < 9000, `took ${read.ms} ms`);
});

db.test("31 [all] read_with_poll with max_poll_seconds 0 returns nothing at once", async ({ sql }) => {
  const q = await queueWith(sql, "t_poll_zero", 1);
  const read = await timedRead(sql, sql`pgmq.read_with_poll(${q}::text, 30, 10, 0, 100)`);
  assert.deepEqual(read.ids, []);
  assert.ok(read.ms < 1000, `took ${read.ms} ms`);
  // The message was not touched.
  assert.deepEqual(sortedIds(await sql`select * from pgmq.read(${q}::text, 30, 10)`), [1]);
});

db.test("32 [all] a rolled-back read restores the message", async ({ connect }) => {
  const a = connect();
  const q = await queueWith(a, "t_rollback_read", 1);
  await a`begin`;
  const inTx = await a`select * from pgmq.read(${q}::text, 30, 1)`;
  assert.deepEqual(sortedIds(inTx), [1]);
  await a`rollback`;
  const [again] = await a`select * from pgmq.read(${q}::text, 30, 1)`;
  assert.equal(Number(again.msg_id), 1);
  assert.equal(again.read_ct, 1);
});

db.test("[all] reading a queue that was never created fails with 42P01", async ({ sql }) => {
  const q = freshQueue("t_nope");
  await assert.rejects(() => sql`select * from pgmq.read(${q}::text, 30, 1)`, pgError("42P01"));
});
