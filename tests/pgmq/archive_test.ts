// pop, set_vt, archive and delete, as PGMQ 1.5.1 defines them.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { freshQueue, pgmqTarget, sortedIds } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

async function queueWith(sql: postgres.Sql, prefix: string, count: number): Promise<string> {
  const q = freshQueue(prefix);
  await sql`select pgmq.create(${q}::text)`;
  for (let i = 1; i <= count; i++) {
    await sql`select pgmq.send(${q}::text, ${sql.json({ i })}::jsonb)`;
  }
  return q;
}

async function count(sql: postgres.Sql, table: string, where = "true"): Promise<number> {
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.${table} where ${where}`);
  return n;
}

db.test("36 [all] pop removes the oldest message without archiving it", async ({ sql }) => {
  const empty = await queueWith(sql, "t_pop_empty", 0);
  assert.equal((await sql`select * from pgmq.pop(${empty}::text)`).length, 0);
  const q = await queueWith(sql, "t_pop", 2);
  const popped = await sql`select * from pgmq.pop(${q}::text)`;
  assert.equal(popped.length, 1);
  assert.equal(Number(popped[0].msg_id), 1);
  assert.equal(popped[0].read_ct, 0);
  assert.deepEqual(popped[0].message, { i: 1 });
  assert.equal(await count(sql, `q_${q}`, "msg_id = 1"), 0);
  assert.equal(await count(sql, `a_${q}`), 0);
  // pop returns the stored read_ct, without counting itself.
  await sql`select * from pgmq.read(${q}::text, 0, 1)`;
  const [again] = await sql`select * from pgmq.pop(${q}::text)`;
  assert.equal(Number(again.msg_id), 2);
  assert.equal(again.read_ct, 1);
});

db.test("37 [all] pop skips a delayed message", async ({ sql }) => {
  const q = await queueWith(sql, "t_pop_delay", 0);
  await sql`select pgmq.send(${q}::text, '{}'::jsonb, 60)`;
  assert.equal((await sql`select * from pgmq.pop(${q}::text)`).length, 0);
  assert.equal(await count(sql, `q_${q}`), 1);
});

db.test("38 [ver] pop sees a message sent earlier in the same transaction", async ({ sql, connect }) => {
  const target = await pgmqTarget(sql);
  const q = await queueWith(sql, "t_pop_sametx", 0);
  const a = connect();
  await a`begin`;
  await a`select pgmq.send(${q}::text, '{}'::jsonb)`;
  await a`select pg_sleep(0.01)`; // let clock_timestamp() move past the send's vt
  const popped = await a`select * from pgmq.pop(${q}::text)`;
  await a`commit`;
  // 1.5.1 and the clone compare with clock_timestamp(); 1.4.x and 1.5.0 with now().
  assert.equal(popped.length, target.has151 ? 1 : 0);
});

db.test("39 [all] set_vt moves visibility and keeps read_ct", async ({ sql }) => {
  const q = await queueWith(sql, "t_setvt", 1);
  assert.equal((await sql`select * from pgmq.set_vt(${q}::text, 9999::bigint, 10)`).length, 0);
  await sql`select * from pgmq.read(${q}::text, 0, 1)`;
  const rows = await sql`
    select *, vt > clock_timestamp() + interval '90 seconds' as later
    from pgmq.set_vt(${q}::text, 1::bigint, 100)`;
  assert.equal(rows.length, 1);
  assert.equal(Number(rows[0].msg_id), 1);
  assert.equal(rows[0].read_ct, 1);
  assert.equal(rows[0].later, true);
  assert.equal((await sql`select * from pgmq.read(${q}::text, 30, 1)`).length, 0);
  const back =
    await sql`select * from pgmq.set_vt(queue_name => ${q}::text, msg_id => 1::bigint, vt => 0)`;
  assert.equal(back[0].read_ct, 1);
  assert.deepEqual(sortedIds(await sql`select * from pgmq.read(${q}::text, 30, 1)`), [1]);
});

db.test("40 [all] archive moves the row intact into the archive", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const q = await queueWith(sql, "t_archive", 0);
  const [{ id }] = target.has15
    ? await sql`select pgmq.send(${q}::text, '{"a":1}'::jsonb, '{"h":1}'::jsonb) as id`
    : await sql`select pgmq.send(${q}::text, '{"a":1}'::jsonb) as id`;
  await sql`select * from pgmq.read(${q}::text, 0, 1)`;
  const [before] = await sql.unsafe(`select * from pgmq.q_${q} where msg_id = $1`, [id]);
  const [{ ok }] = await sql`select pgmq.archive(${q}::text, ${id}::bigint) as ok`;
  assert.equal(ok, true);
  assert.equal(await count(sql, `q_${q}`), 0);
  const [row] = await sql.unsafe(`select * from pgmq.a_${q} where msg_id = $1`, [id]);
  const columns = ["msg_id", "read_ct", "enqueued_at", "archived_at", "vt", "message"];
  assert.deepEqual(Object.keys(row), target.has15 ? [...columns, "headers"] : columns);
  assert.equal(row.msg_id, before.msg_id);
  assert.equal(row.read_ct, 1);
  assert.equal(row.enqueued_at.getTime(), before.enqueued_at.getTime());
  assert.equal(row.vt.getTime(), before.vt.getTime());
  assert.deepEqual(row.message, { a: 1 });
  if (target.has15) assert.deepEqual(row.headers, { h: 1 });
  assert.ok(row.archived_at.getTime() >= row.enqueued_at.getTime());
  const [{ again }] = await sql`select pgmq.archive(${q}::text, ${id}::bigint) as again`;
  assert.equal(again, false);
  const [{ unknown }] = await sql`select pgmq.archive(${q}::text, 999::bigint) as unknown`;
  assert.equal(unknown, false);
});

db.test("41 [all] archive of an id array returns the ids that moved", async ({ sql }) => {
  const q = await queueWith(sql, "t_archive_many", 3);
  const rows = await sql`select * from pgmq.archive(${q}::text, array[1, 2, 999]::bigint[])`;
  assert.deepEqual(rows.columns.map((c) => c.name), ["archive"]);
  assert.deepEqual(sortedIds(rows, "archive"), [1, 2]);
  assert.equal(await count(sql, `a_${q}`), 2);
  // An in-flight (invisible) message can still be archived.
  assert.deepEqual(sortedIds(await sql`select * from pgmq.read(${q}::text, 30, 1)`), [3]);
  const [{ ok }] = await sql`select pgmq.archive(${q}::text, 3::bigint) as ok`;
  assert.equal(ok, true);
  const named =
    await sql`select * from pgmq.archive(queue_name => ${q}::text, msg_ids => array[3]::bigint[])`;
  assert.equal(named.length, 0);
});

db.test("42 [all] delete removes messages for good and leaves the archive alone", async ({ sql }) => {
  const q = await queueWith(sql, "t_delete", 4);
  await sql`select pgmq.archive(${q}::text, 4::bigint)`;
  const [{ first }] = await sql`select pgmq.delete(${q}::text, 1::bigint) as first`;
  const [{ second }] = await sql`select pgmq.delete(${q}::text, 1::bigint) as second`;
  assert.deepEqual([first, second], [true, false]);
  const rows = await sql`select * from pgmq.delete(${q}::text, array[2, 3, 999]::bigint[])`;
  assert.deepEqual(rows.columns.map((c) => c.name), ["delete"]);
  assert.deepEqual(sortedIds(rows, "delete"), [2, 3]);
  assert.equal(await count(sql, `q_${q}`), 0);
  assert.equal(await count(sql, `a_${q}`), 1);
  const named =
    await sql`select * from pgmq.delete(queue_name => ${q}::text, msg_ids => array[4]::bigint[])`;
  assert.equal(named.length, 0);
});

db.test("[all] duplicate ids in the array forms count once", async ({ sql }) => {
  const q = await queueWith(sql, "t_dupes", 2);
  const archived = await sql`select * from pgmq.archive(${q}::text, array[1, 1]::bigint[])`;
  assert.deepEqual(sortedIds(archived, "archive"), [1]);
  const deleted = await sql`select * from pgmq.delete(${q}::text, array[2, 2]::bigint[])`;
  assert.deepEqual(sortedIds(deleted, "delete"), [2]);
});

db.test("[all] a rolled-back pop, archive or delete restores the message", async ({ connect }) => {
  const a = connect();
  const q = await queueWith(a, "t_rollback_ops", 1);
  for (const op of ["pop", "archive", "delete"]) {
    await a`begin`;
    if (op === "pop") await a`select * from pgmq.pop(${q}::text)`;
    else await a.unsafe(`select pgmq.${op}($1::text, 1::bigint)`, [q]);
    await a`rollback`;
    assert.equal(await count(a, `q_${q}`, "msg_id = 1"), 1, op);
    assert.equal(await count(a, `a_${q}`), 0, op);
  }
});
