// The catalog shape callers see: meta, queue tables, composite types, function signatures and
// grants.
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { BEFORE_15, freshQueue, ON_EXTENSION, pgmqTarget } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

const COLUMNS = `
  select column_name as name, data_type as type, is_nullable as null,
         column_default as def, coalesce(identity_generation, '') as identity
  from information_schema.columns
  where table_schema = 'pgmq' and table_name = $1 order by ordinal_position`;

db.test("[all] pgmq.meta has PGMQ's columns and unique constraint", async ({ sql }) => {
  const cols = await sql.unsafe(COLUMNS, ["meta"]);
  assert.deepEqual(cols.map((c) => [c.name, c.type, c.null, c.def]), [
    ["queue_name", "character varying", "NO", null],
    ["is_partitioned", "boolean", "NO", null],
    ["is_unlogged", "boolean", "NO", null],
    ["created_at", "timestamp with time zone", "NO", "now()"],
  ]);
  const cons = await sql`
    select conname, contype from pg_constraint where conrelid = 'pgmq.meta'::regclass`;
  assert.deepEqual(cons.map((c) => [c.conname, c.contype]), [["meta_queue_name_key", "u"]]);
});

db.test("[all] queue and archive tables have PGMQ's columns, keys and indexes", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const raw = `Shape-${freshQueue("Q")}`;
  const n = raw.toLowerCase();
  await sql`select pgmq.create(${raw}::text)`;
  const q = await sql.unsafe(COLUMNS, [`q_${n}`]);
  const qExpected = [
    ["msg_id", "bigint", "NO", null, "ALWAYS"],
    ["read_ct", "integer", "NO", "0", ""],
    ["enqueued_at", "timestamp with time zone", "NO", "now()", ""],
    ["vt", "timestamp with time zone", "NO", null, ""],
    ["message", "jsonb", "YES", null, ""],
  ];
  if (target.has15) qExpected.push(["headers", "jsonb", "YES", null, ""]);
  assert.deepEqual(q.map((c) => [c.name, c.type, c.null, c.def, c.identity]), qExpected);
  const a = await sql.unsafe(COLUMNS, [`a_${n}`]);
  const aExpected = [
    ["msg_id", "bigint", "NO", null, ""],
    ["read_ct", "integer", "NO", "0", ""],
    ["enqueued_at", "timestamp with time zone", "NO", "now()", ""],
    ["archived_at", "timestamp with time zone", "NO", "now()", ""],
    ["vt", "timestamp with time zone", "NO", null, ""],
    ["message", "jsonb", "YES", null, ""],
  ];
  if (target.has15) aExpected.push(["headers", "jsonb", "YES", null, ""]);
  assert.deepEqual(a.map((c) => [c.name, c.type, c.null, c.def, c.identity]), aExpected);

  const indexes = await sql`
    select c.relname as tbl, i.relname as idx, pg_get_indexdef(i.oid) as def, x.indisprimary as pk
    from pg_index x join pg_class i on i.oid = x.indexrelid join pg_class c on c.oid = x.indrelid
    where c.relnamespace = 'pgmq'::regnamespace and c.relname in (${"q_" + n}, ${"a_" + n})
    order by 2`;
  const got = indexes.map((r) => [r.tbl, r.idx, r.pk, /\((\w+)\)$/.exec(r.def)?.[1]]);
  assert.deepEqual(
    got,
    [
      [`a_${n}`, `a_${n}_pkey`, true, "msg_id"],
      [`a_${n}`, `archived_at_idx_${raw}`, false, "archived_at"],
      [`q_${n}`, `q_${n}_pkey`, true, "msg_id"],
      [`q_${n}`, `q_${n}_vt_idx`, false, "vt"],
    ].sort((x, y) => (x[1] as string) < (y[1] as string) ? -1 : 1),
  );
  const [{ seq }] = await sql`
    select pg_get_serial_sequence(format('pgmq.%I', ${"q_" + n}::text), 'msg_id') as seq`;
  assert.equal(seq, `pgmq."q_${n}_msg_id_seq"`);
});

db.test("[all] composite types keep PGMQ's attribute order", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const attrs = async (type: string) =>
    (await sql`
      select attname, format_type(atttypid, atttypmod) as t from pg_attribute
      where attrelid = (select typrelid from pg_type where oid = ${type}::regtype)
        and attnum > 0 and not attisdropped order by attnum`).map((r) => `${r.attname} ${r.t}`);
  const message = [
    "msg_id bigint",
    "read_ct integer",
    "enqueued_at timestamp with time zone",
    "vt timestamp with time zone",
    "message jsonb",
  ];
  if (target.has15) message.push("headers jsonb");
  assert.deepEqual(await attrs("pgmq.message_record"), message);
  assert.deepEqual(await attrs("pgmq.queue_record"), [
    "queue_name character varying",
    "is_partitioned boolean",
    "is_unlogged boolean",
    "created_at timestamp with time zone",
  ]);
  const metrics = [
    "queue_name text",
    "queue_length bigint",
    "newest_msg_age_sec integer",
    "oldest_msg_age_sec integer",
    "total_messages bigint",
    "scrape_time timestamp with time zone",
  ];
  if (target.has15) metrics.push("queue_visible_length bigint");
  assert.deepEqual(await attrs("pgmq.metrics_result"), metrics);
});

db.test(
  "[1.5] public functions have PGMQ 1.5's signatures and parameter names",
  async ({ sql }) => {
    const rows = await sql`
    select p.proname || '(' || pg_get_function_arguments(p.oid) || ') ' ||
           pg_get_function_result(p.oid) as sig
    from pg_proc p where p.pronamespace = 'pgmq'::regnamespace`;
    const have = new Set(rows.map((r) => r.sig));
    const expected = [
      "format_table_name(queue_name text, prefix text) text",
      "validate_queue_name(queue_name text) void",
      "create(queue_name text) void",
      "create_non_partitioned(queue_name text) void",
      "create_unlogged(queue_name text) void",
      "create_partitioned(queue_name text, partition_interval text DEFAULT '10000'::text, " +
      "retention_interval text DEFAULT '100000'::text) void",
      "drop_queue(queue_name text) boolean",
      "drop_queue(queue_name text, partitioned boolean) boolean",
      "detach_archive(queue_name text) void",
      "list_queues() SETOF pgmq.queue_record",
      "read(queue_name text, vt integer, qty integer, conditional jsonb DEFAULT '{}'::jsonb) " +
      "SETOF pgmq.message_record",
      "read_with_poll(queue_name text, vt integer, qty integer, max_poll_seconds integer DEFAULT 5, " +
      "poll_interval_ms integer DEFAULT 100, conditional jsonb DEFAULT '{}'::jsonb) " +
      "SETOF pgmq.message_record",
      "pop(queue_name text) SETOF pgmq.message_record",
      "set_vt(queue_name text, msg_id bigint, vt integer) SETOF pgmq.message_record",
      "archive(queue_name text, msg_id bigint) boolean",
      "archive(queue_name text, msg_ids bigint[]) SETOF bigint",
      "delete(queue_name text, msg_id bigint) boolean",
      "delete(queue_name text, msg_ids bigint[]) SETOF bigint",
      "purge_queue(queue_name text) bigint",
      "metrics(queue_name text) pgmq.metrics_result",
      "metrics_all() SETOF pgmq.metrics_result",
      "send(queue_name text, msg jsonb) SETOF bigint",
      "send_batch(queue_name text, msgs jsonb[]) SETOF bigint",
    ];
    const missing = expected.filter((s) => !have.has(s));
    assert.deepEqual(missing, []);
  },
  { ignore: BEFORE_15 },
);

db.test("[all] functions are volatile, security invoker, with no search_path of their own", async ({ sql }) => {
  const odd = await sql`
    select p.proname, p.provolatile, p.prosecdef, p.proconfig
    from pg_proc p where p.pronamespace = 'pgmq'::regnamespace
      and p.proname not like '\\_%'
      and (p.provolatile <> 'v' or p.prosecdef or p.proconfig is not null)`;
  assert.deepEqual(odd.map((r) => r.proname), []);
});

db.test("[all] pg_monitor may read the schema's tables", async ({ sql }) => {
  const [{ role }] =
    await sql`select exists (select 1 from pg_roles where rolname = 'pg_monitor') as role`;
  assert.equal(role, true, "pg_monitor is a predefined role since PostgreSQL 10");
  const [r] = await sql`
    select has_schema_privilege('pg_monitor', 'pgmq', 'usage') as usage,
           has_table_privilege('pg_monitor', 'pgmq.meta', 'select') as meta`;
  assert.deepEqual({ ...r }, { usage: true, meta: true });
});

db.test("[compatible] queues created later are readable by pg_monitor too", async ({ sql }) => {
  // Default privileges only cover objects created by the installing role, which is the test role
  // on a fresh install; on a managed server the installer may differ, so check the clone only.
  const q = freshQueue("t_monitor");
  await sql`select pgmq.create(${q}::text)`;
  const [r] = await sql`
    select has_table_privilege('pg_monitor', ${"pgmq.q_" + q}, 'select') as q,
           has_table_privilege('pg_monitor', ${"pgmq.a_" + q}, 'select') as a,
           has_sequence_privilege('pg_monitor', ${"pgmq.q_" + q + "_msg_id_seq"}, 'select') as s`;
  assert.deepEqual({ ...r }, { q: true, a: true, s: true });
}, { ignore: ON_EXTENSION });

db.test(
  "[compatible] running local/pgmq.sql again changes nothing and keeps queues",
  async ({ sql }) => {
    const q = freshQueue("t_reinstall");
    await sql`select pgmq.create(${q}::text)`;
    await sql`select pgmq.send(${q}::text, '{"kept":true}'::jsonb)`;
    const script = await Deno.readTextFile(new URL("../../local/pgmq.sql", import.meta.url));
    await sql.unsafe(script).simple();
    const [m] = await sql`select * from pgmq.read(${q}::text, 30, 1)`;
    assert.deepEqual(m.message, { kept: true });
    const [{ ext }] =
      await sql`select count(*)::int as ext from pg_extension where extname = 'pgmq'`;
    assert.equal(ext, 0);
  },
  { ignore: ON_EXTENSION },
);
