// Queue management: create, list, drop.
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import {
  BEFORE_15,
  errorCode,
  freshQueue,
  pgError,
  pgmqTarget,
  relationExists,
} from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

db.test("1 [all] create returns one void row and list_queues shows the queue", async ({ sql }) => {
  const q = freshQueue("t_basic");
  const rows = await sql`select pgmq.create(${q}::text) as r`;
  assert.equal(rows.length, 1);
  assert.equal(rows[0].r, "");
  const listed = await sql`select * from pgmq.list_queues() where queue_name = ${q}`;
  assert.equal(listed.length, 1);
  assert.deepEqual(Object.keys(listed[0]), [
    "queue_name",
    "is_partitioned",
    "is_unlogged",
    "created_at",
  ]);
  assert.equal(listed[0].is_partitioned, false);
  assert.equal(listed[0].is_unlogged, false);
  assert.ok(listed[0].created_at instanceof Date);
  assert.ok(await relationExists(sql, `pgmq.q_${q}`));
  assert.ok(await relationExists(sql, `pgmq.a_${q}`));
});

db.test("2 [all] creating a queue twice keeps one meta row and its created_at", async ({ sql }) => {
  const q = freshQueue("t_twice");
  await sql`select pgmq.create(${q}::text)`;
  const [first] = await sql`select created_at from pgmq.meta where queue_name = ${q}`;
  await sql`select pgmq.create(${q}::text)`;
  const rows = await sql`select created_at from pgmq.meta where queue_name = ${q}`;
  assert.equal(rows.length, 1);
  assert.equal(rows[0].created_at.getTime(), first.created_at.getTime());
});

db.test("3 [all] names are lowercased for tables but kept raw in meta", async ({ sql }) => {
  const q = freshQueue("MixedCase");
  await sql`select pgmq.create(${q}::text)`;
  assert.ok(await relationExists(sql, `pgmq.q_${q.toLowerCase()}`));
  const listed = await sql`select queue_name from pgmq.list_queues() where queue_name = ${q}`;
  assert.equal(listed.length, 1);
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{"x":1}'::jsonb) as id`;
  const read = await sql`select * from pgmq.read(${q.toLowerCase()}::text, 30, 1)`;
  assert.equal(read.length, 1);
  assert.equal(read[0].msg_id, id);
  assert.deepEqual(read[0].message, { x: 1 });
});

db.test("4 [all] a name with a hyphen and a space round-trips", async ({ sql }) => {
  const q = `a-b c ${freshQueue("x")}`;
  await sql`select pgmq.create(${q}::text)`;
  const [{ ok }] = await sql`
    select to_regclass(format('pgmq.%I', ${"q_" + q}::text)) is not null as ok`;
  assert.ok(ok);
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{"k":"v"}'::jsonb) as id`;
  const read = await sql`select * from pgmq.read(${q}::text, 30, 5)`;
  assert.deepEqual(read.map((r) => r.msg_id), [id]);
  const [{ archived }] = await sql`select pgmq.archive(${q}::text, ${id}::bigint) as archived`;
  assert.equal(archived, true);
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.${quoteIdent("a_" + q)}`);
  assert.equal(n, 1);
});

db.test("9 [all] a rolled-back create leaves no meta row and no table", async ({ connect }) => {
  const a = connect();
  const q = freshQueue("t_tx");
  await a`begin`;
  await a`select pgmq.create(${q}::text)`;
  await a`rollback`;
  const rows = await a`select 1 from pgmq.meta where queue_name = ${q}`;
  assert.equal(rows.length, 0);
  assert.equal(await relationExists(a, `pgmq.q_${q}`), false);
});

db.test("10 [all] create_unlogged: unlogged queue, logged archive", async ({ sql }) => {
  const q = freshQueue("t_unl");
  await sql`select pgmq.create_unlogged(${q}::text)`;
  const rels = await sql`
    select relname, relpersistence from pg_class
    where relnamespace = 'pgmq'::regnamespace and relname in (${"q_" + q}, ${"a_" + q})`;
  const persistence = Object.fromEntries(rels.map((r) => [r.relname, r.relpersistence]));
  assert.deepEqual(persistence, { [`q_${q}`]: "u", [`a_${q}`]: "p" });
  const [meta] = await sql`select is_unlogged from pgmq.meta where queue_name = ${q}`;
  assert.equal(meta.is_unlogged, true);
  // Creating it again with the other kind does not switch it.
  await sql`select pgmq.create(${q}::text)`;
  const [again] = await sql`select is_unlogged from pgmq.meta where queue_name = ${q}`;
  assert.equal(again.is_unlogged, true);
});

db.test("11 [all] create_partitioned without pg_partman fails and registers nothing", async ({ sql }) => {
  const [{ partman }] = await sql`
    select exists (select 1 from pg_extension where extname = 'pg_partman') as partman`;
  // The run's databases come from template0 with PGMQ alone: pg_partman is never installed.
  assert.equal(partman, false, "pg_partman is installed in the test database");
  const q = freshQueue("t_part");
  await assert.rejects(
    () => sql`select pgmq.create_partitioned(${q}::text)`,
    pgError("P0001", "pg_partman is required for partitioned queues"),
  );
  const rows = await sql`select 1 from pgmq.meta where queue_name = ${q}`;
  assert.equal(rows.length, 0);
});

db.test("12 [all] drop_queue on an existing queue removes tables and meta row", async ({ sql }) => {
  const q = freshQueue("t_drop");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select pgmq.send(${q}::text, '{}'::jsonb)`;
  const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text) as dropped`;
  assert.equal(dropped, true);
  assert.equal(await relationExists(sql, `pgmq.q_${q}`), false);
  assert.equal(await relationExists(sql, `pgmq.a_${q}`), false);
  assert.equal((await sql`select 1 from pgmq.meta where queue_name = ${q}`).length, 0);
});

db.test("13 [ver] drop_queue of a queue never created changes nothing", async ({ sql, notices }) => {
  const target = await pgmqTarget(sql);
  const q = freshQueue("never_created");
  const before = await sql`select queue_name from pgmq.meta order by 1`;
  if (target.extension) {
    // 1.4.4/1.5.1 extension: 42P01; 1.5.2+: false; Supabase's hook: true.
    try {
      const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text) as dropped`;
      assert.equal(typeof dropped, "boolean");
    } catch (e) {
      assert.equal(errorCode(e), "42P01");
    }
  } else {
    const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text) as dropped`;
    assert.equal(dropped, false);
    assert.ok(notices.some((n) => n.severity === "NOTICE" && n.message.includes(q)));
  }
  const after = await sql`select queue_name from pgmq.meta order by 1`;
  assert.deepEqual(after, before);
});

db.test("14 [1.5] deprecated drop_queue(q, true) warns and drops", async ({ sql, notices }) => {
  const q = freshQueue("t_dep");
  await sql`select pgmq.create(${q}::text)`;
  const [{ dropped }] = await sql`select pgmq.drop_queue(${q}::text, true) as dropped`;
  assert.equal(dropped, true);
  assert.ok(notices.some((n) => n.severity === "WARNING" && /deprecated/.test(n.message)));
  assert.equal(await relationExists(sql, `pgmq.q_${q}`), false);
  assert.equal((await sql`select 1 from pgmq.meta where queue_name = ${q}`).length, 0);
}, { ignore: BEFORE_15 });

db.test("15 [all] a dropped and recreated queue numbers from 1 again", async ({ sql }) => {
  const q = freshQueue("t_recreate");
  await sql`select pgmq.create(${q}::text)`;
  await sql`select pgmq.send(${q}::text, '{}'::jsonb)`;
  await sql`select pgmq.send(${q}::text, '{}'::jsonb)`;
  await sql`select pgmq.drop_queue(${q}::text)`;
  await sql`select pgmq.create(${q}::text)`;
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{}'::jsonb) as id`;
  assert.equal(Number(id), 1);
});

db.test("[all] create and send accept PGMQ's named arguments", async ({ sql }) => {
  const q = freshQueue("t_named");
  await sql`select pgmq.create(queue_name => ${q}::text)`;
  const [{ id }] = await sql`
    select pgmq.send(queue_name => ${q}::text, msg => '{"n":1}'::jsonb, delay => 0) as id`;
  const read = await sql`select * from pgmq.read(queue_name => ${q}::text, vt => 30, qty => 1)`;
  assert.equal(read[0].msg_id, id);
  const [{ ok }] =
    await sql`select pgmq.delete(queue_name => ${q}::text, msg_id => ${id}::bigint) as ok`;
  assert.equal(ok, true);
  const [{ dropped }] = await sql`select pgmq.drop_queue(queue_name => ${q}::text) as dropped`;
  assert.equal(dropped, true);
});

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

db.test(
  "[all] names differing only in case share one table pair but not the meta row",
  async ({ sql }) => {
    const lower = freshQueue("t_fold");
    const upper = lower.toUpperCase();
    await sql`select pgmq.create(${upper}::text)`;
    await sql`select pgmq.create(${lower}::text)`;
    const meta = await sql`
    select queue_name from pgmq.meta where lower(queue_name) = ${lower} order by 1`;
    assert.deepEqual(meta.map((r) => r.queue_name), [upper, lower].sort());
    await sql`select pgmq.send(${upper}::text, '{}'::jsonb)`;
    const [m] = await sql`select * from pgmq.metrics(${lower}::text)`;
    assert.equal(Number(m.queue_length), 1);
    // Dropping one spelling drops the shared tables and only its own meta row.
    const [{ dropped }] = await sql`select pgmq.drop_queue(${lower}::text) as dropped`;
    assert.equal(dropped, true);
    assert.equal(await relationExists(sql, `pgmq.q_${lower}`), false);
    const left = await sql`select queue_name from pgmq.meta where lower(queue_name) = ${lower}`;
    assert.deepEqual(left.map((r) => r.queue_name), [upper]);
    // The orphaned row makes metrics_all fail, as upstream does.
    await assert.rejects(() => sql`select * from pgmq.metrics_all()`, pgError("42P01"));
  },
  { fresh: true },
);

db.test("[all] the empty queue name is accepted", async ({ sql }) => {
  await sql`select pgmq.create(''::text)`;
  assert.ok(await relationExists(sql, "pgmq.q_"));
  assert.ok(await relationExists(sql, "pgmq.a_"));
  const [{ id }] = await sql`select pgmq.send(''::text, '{"e":1}'::jsonb) as id`;
  const rows = await sql`select * from pgmq.read(''::text, 30, 1)`;
  assert.deepEqual(rows.map((r) => r.msg_id), [id]);
  const [{ dropped }] = await sql`select pgmq.drop_queue(''::text) as dropped`;
  assert.equal(dropped, true);
}, { fresh: true });
