// purge_queue, metrics and metrics_all.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { BEFORE_15, freshQueue, pgError, pgmqTarget } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

async function queueWith(sql: postgres.Sql, prefix: string, count: number): Promise<string> {
  const q = freshQueue(prefix);
  await sql`select pgmq.create(${q}::text)`;
  for (let i = 1; i <= count; i++) await sql`select pgmq.send(${q}::text, '{}'::jsonb)`;
  return q;
}

db.test("43 [all] purge_queue empties the queue, not the archive or the numbering", async ({ sql }) => {
  const q = await queueWith(sql, "t_purge", 5);
  await sql`select pgmq.archive(${q}::text, 1::bigint)`;
  const [{ purged }] = await sql`select pgmq.purge_queue(${q}::text) as purged`;
  assert.equal(Number(purged), 4);
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.q_${q}`);
  const [{ a }] = await sql.unsafe(`select count(*)::int as a from pgmq.a_${q}`);
  assert.deepEqual([n, a], [0, 1]);
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{}'::jsonb) as id`;
  assert.equal(Number(id), 6);
  const [{ again }] = await sql`select pgmq.purge_queue(${q}::text) as again`;
  assert.equal(Number(again), 1);
});

db.test("44 [all] metrics of a fresh queue", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const q = await queueWith(sql, "t_metrics_fresh", 0);
  const rows =
    await sql`select m.*, m.scrape_time = now() as scraped_now from pgmq.metrics(${q}::text) m`;
  assert.equal(rows.length, 1);
  const m = rows[0];
  const columns = [
    "queue_name",
    "queue_length",
    "newest_msg_age_sec",
    "oldest_msg_age_sec",
    "total_messages",
    "scrape_time",
  ];
  assert.deepEqual(
    Object.keys(m).filter((k) => k !== "scraped_now"),
    target.has15 ? [...columns, "queue_visible_length"] : columns,
  );
  assert.equal(m.queue_name, q);
  assert.equal(Number(m.queue_length), 0);
  assert.equal(m.newest_msg_age_sec, null);
  assert.equal(m.oldest_msg_age_sec, null);
  assert.equal(Number(m.total_messages), 0);
  assert.equal(m.scraped_now, true);
  if (target.has15) assert.equal(Number(m.queue_visible_length), 0);
});

db.test("45 [all] metrics count queued, visible and all-time messages", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const q = await queueWith(sql, "t_metrics", 5);
  await sql`select pgmq.send(${q}::text, '{}'::jsonb, 10)`;
  await sql`select pgmq.send(${q}::text, '{}'::jsonb, 10)`;
  await sql`select pgmq.archive(${q}::text, 1::bigint)`;
  const [m] = await sql`select * from pgmq.metrics(${q}::text)`;
  assert.equal(Number(m.queue_length), 6);
  assert.equal(Number(m.total_messages), 7);
  for (const age of [m.newest_msg_age_sec, m.oldest_msg_age_sec]) {
    assert.ok(Number.isInteger(age) && age >= 0 && age < 30, `age ${age}`);
  }
  if (target.has15) assert.equal(Number(m.queue_visible_length), 4);
});

db.test("[1.5] queue_visible_length uses transaction time", async ({ connect }) => {
  const a = connect();
  const q = await queueWith(a, "t_metrics_tx", 0);
  await a`begin`;
  await a`select pgmq.send(${q}::text, '{}'::jsonb)`;
  const [m] = await a`select * from pgmq.metrics(${q}::text)`;
  await a`commit`;
  assert.equal(Number(m.queue_length), 1);
  assert.equal(Number(m.queue_visible_length), 0);
}, { ignore: BEFORE_15 });

db.test("46 [all] rolled-back sends still count; queue_name is echoed as passed", async ({ sql, connect }) => {
  const q = await queueWith(sql, "t_metrics_rb", 1);
  const a = connect();
  await a`begin`;
  await a`select pgmq.send(${q}::text, '{}'::jsonb)`;
  await a`rollback`;
  const [m] = await sql`select * from pgmq.metrics(${q}::text)`;
  assert.equal(Number(m.total_messages), 2);
  assert.equal(Number(m.queue_length), 1);
  const upper = q.toUpperCase();
  const [echo] = await sql`select * from pgmq.metrics(${upper}::text)`;
  assert.equal(echo.queue_name, upper);
  assert.equal(Number(echo.queue_length), 1);
});

db.test("47 [all] metrics_all has one row per queue; a missing queue is 42P01", async ({ sql }) => {
  const names = [await queueWith(sql, "t_all_a", 1), await queueWith(sql, "t_All_B", 2)];
  const listed = await sql`select queue_name from pgmq.list_queues()`;
  const all = await sql`select * from pgmq.metrics_all()`;
  assert.equal(all.length, listed.length);
  assert.deepEqual(
    all.map((r) => r.queue_name).sort(),
    listed.map((r) => r.queue_name).sort(),
  );
  for (const name of names) assert.ok(all.some((r) => r.queue_name === name));
  const b = all.find((r) => r.queue_name === names[1])!;
  assert.equal(Number(b.queue_length), 2);
  const missing = freshQueue("t_never");
  await assert.rejects(
    () => sql`select * from pgmq.metrics(${missing}::text)`,
    pgError("42P01", `relation "pgmq.q_${missing}" does not exist`),
  );
});

db.test("[all] metrics does not wait for a reader holding rows", async ({ sql, connect }) => {
  const q = await queueWith(sql, "t_metrics_lock", 2);
  const a = connect();
  const b = connect();
  await b`set lock_timeout = '300ms'`;
  await a`begin`;
  await a`select * from pgmq.read(${q}::text, 30, 2)`;
  const [m] = await b`select * from pgmq.metrics(${q}::text)`;
  await a`commit`;
  assert.equal(Number(m.queue_length), 2);
});
