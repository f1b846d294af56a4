// Sending: send and send_batch, their overloads and delays.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { BEFORE_15, freshQueue, pgError } from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

async function queue(sql: postgres.Sql, prefix: string): Promise<string> {
  const q = freshQueue(prefix);
  await sql`select pgmq.create(${q}::text)`;
  return q;
}

db.test("16 [all] sends return 1, 2, 3 in a column named send", async ({ sql }) => {
  const q = await queue(sql, "t_send");
  const ids = [];
  for (let i = 0; i < 3; i++) {
    const rows = await sql`select * from pgmq.send(${q}::text, ${sql.json({ i })}::jsonb)`;
    assert.equal(rows.length, 1);
    assert.deepEqual(rows.columns.map((c) => c.name), ["send"]);
    assert.equal(rows.columns[0].type, 20); // bigint
    ids.push(Number(rows[0].send));
  }
  assert.deepEqual(ids, [1, 2, 3]);
});

db.test("17 [all] an integer delay hides the message for that many seconds", async ({ sql }) => {
  const q = await queue(sql, "t_delay");
  const [{ now }] = await sql`select pgmq.send(${q}::text, '{"d":0}'::jsonb, 0) as now`;
  const [{ later }] = await sql`select pgmq.send(${q}::text, '{"d":5}'::jsonb, 5) as later`;
  const read = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.deepEqual(read.map((r) => r.msg_id), [now]);
  const [{ ok }] = await sql.unsafe(
    `select vt > clock_timestamp() + interval '4 seconds'
        and vt < clock_timestamp() + interval '6 seconds' as ok
     from pgmq.q_${q} where msg_id = $1`,
    [later],
  );
  assert.equal(ok, true);
});

db.test("[all] a negative delay is visible at once; a NULL delay is a not-null error", async ({ sql }) => {
  const q = await queue(sql, "t_negdelay");
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{}'::jsonb, -10) as id`;
  const read = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.deepEqual(read.map((r) => r.msg_id), [id]);
  await assert.rejects(
    () => sql`select pgmq.send(${q}::text, '{}'::jsonb, null::integer)`,
    pgError("23502"),
  );
  // The failed send still consumed an id.
  const [{ next }] = await sql`select pgmq.send(${q}::text, '{}'::jsonb) as next`;
  assert.equal(Number(next), 3);
});

db.test("18 [all] a NULL message is stored as SQL NULL", async ({ sql }) => {
  const q = await queue(sql, "t_null");
  const [{ id }] = await sql`select pgmq.send(${q}::text, null::jsonb) as id`;
  assert.ok(id);
  const read =
    await sql`select msg_id, message is null as is_null from pgmq.read(${q}::text, 30, 1)`;
  assert.deepEqual(read.map((r) => ({ ...r })), [{ msg_id: id, is_null: true }]);
});

db.test(
  "19 [1.5] headers travel with the message through read, pop and archive",
  async ({ sql }) => {
    const q = await queue(sql, "t_headers");
    const send = () => sql`select pgmq.send(${q}::text, '{"m":1}'::jsonb, '{"h":1}'::jsonb) as id`;
    const [{ id: readId }] = await send();
    const [read] = await sql`select * from pgmq.read(${q}::text, 30, 1)`;
    assert.equal(read.msg_id, readId);
    assert.deepEqual(read.headers, { h: 1 });
    assert.deepEqual(Object.keys(read), [
      "msg_id",
      "read_ct",
      "enqueued_at",
      "vt",
      "message",
      "headers",
    ]);
    const [{ id: popId }] = await send();
    const [popped] = await sql`select * from pgmq.pop(${q}::text)`;
    assert.equal(popped.msg_id, popId);
    assert.deepEqual(popped.headers, { h: 1 });
    await sql`select pgmq.archive(${q}::text, ${readId}::bigint)`;
    const [archived] = await sql.unsafe(`select headers from pgmq.a_${q} where msg_id = $1`, [
      readId,
    ]);
    assert.deepEqual(archived.headers, { h: 1 });
    const [{ id: plainId }] = await sql`select pgmq.send(${q}::text, '{"m":2}'::jsonb) as id`;
    const [plain] = await sql`select * from pgmq.read(${q}::text, 30, 1)`;
    assert.equal(plain.msg_id, plainId);
    assert.equal(plain.headers, null);
  },
  { ignore: BEFORE_15 },
);

db.test("20 [1.5] a timestamptz delay is used as given, even in the past", async ({ sql }) => {
  const q = await queue(sql, "t_tsdelay");
  await sql`select pgmq.send(${q}::text, '{"f":1}'::jsonb, now() + interval '1 hour')`;
  const [{ past }] = await sql`
    select pgmq.send(${q}::text, '{"p":1}'::jsonb, now() - interval '1 minute') as past`;
  const read = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.deepEqual(read.map((r) => r.msg_id), [past]);
  const [{ ok }] = await sql.unsafe(
    `select vt > now() + interval '59 minutes' as ok from pgmq.q_${q} where msg_id = 1`,
  );
  assert.equal(ok, true);
}, { ignore: BEFORE_15 });

db.test("21 [1.5] an uncast third argument is ambiguous; a cast resolves it", async ({ sql }) => {
  const q = await queue(sql, "t_ambig");
  await assert.rejects(
    () => sql.unsafe(`select pgmq.send('${q}', '{"a":1}', '{"h":1}')`),
    pgError("42725", /function pgmq\.send\(unknown, unknown, unknown\) is not unique/),
  );
  const [{ id }] = await sql.unsafe(`select pgmq.send('${q}', '{"a":1}', '{"h":1}'::jsonb) as id`);
  assert.ok(id);
  // Integer literals, timestamptz expressions and the two-argument form resolve without casts.
  await sql.unsafe(`select pgmq.send('${q}', '{"a":2}', 0)`);
  await sql.unsafe(`select pgmq.send('${q}', '{"a":3}', now() + interval '1 second')`);
  await sql.unsafe(`select pgmq.send('${q}', '{"a":4}')`);
  await sql.unsafe(`select pgmq.send_batch('${q}', array['{"a":5}'::jsonb])`);
}, { ignore: BEFORE_15 });

db.test(
  "[1.5] exactly PGMQ 1.5's send and send_batch overloads, without defaults",
  async ({ sql }) => {
    const rows = await sql`
    select p.proname as name, pg_get_function_arguments(p.oid) as args
    from pg_proc p where p.pronamespace = 'pgmq'::regnamespace
      and p.proname in ('send', 'send_batch')`;
    const got = rows.map((r) => `${r.name}(${r.args})`).sort();
    const tail = [
      "",
      ", headers jsonb",
      ", delay integer",
      ", delay timestamp with time zone",
      ", headers jsonb, delay integer",
      ", headers jsonb, delay timestamp with time zone",
    ];
    const expected = [
      ...tail.map((t) => `send(queue_name text, msg jsonb${t})`),
      ...tail.map((t) =>
        `send_batch(queue_name text, msgs jsonb[]${t.replace("headers jsonb", "headers jsonb[]")})`
      ),
    ].sort();
    assert.deepEqual(got, expected);
  },
  { ignore: BEFORE_15 },
);

db.test("22 [all] send_batch returns ascending ids in array order; empty returns none", async ({ sql }) => {
  const q = await queue(sql, "t_batch");
  const rows = await sql`
    select * from pgmq.send_batch(${q}::text,
      array['{"n":"a"}'::jsonb, '{"n":"b"}'::jsonb, '{"n":"c"}'::jsonb])`;
  assert.deepEqual(rows.columns.map((c) => c.name), ["send_batch"]);
  const ids = rows.map((r) => Number(r.send_batch));
  assert.deepEqual(ids, [1, 2, 3]);
  const stored = await sql.unsafe(
    `select msg_id, message->>'n' as n from pgmq.q_${q} order by msg_id`,
  );
  assert.deepEqual(stored.map((r) => r.n), ["a", "b", "c"]);
  const empty = await sql`select * from pgmq.send_batch(${q}::text, array[]::jsonb[])`;
  assert.equal(empty.length, 0);
  const nul = await sql`select * from pgmq.send_batch(${q}::text, null::jsonb[])`;
  assert.equal(nul.length, 0);
});

db.test("[1.5] send_batch delays every message alike", async ({ sql }) => {
  // PGMQ 1.4 computes the vt per row.
  const q = await queue(sql, "t_batchdelay");
  await sql`select * from pgmq.send_batch(${q}::text, array['{}'::jsonb, '{}'::jsonb], 60)`;
  const [{ id }] = await sql`select pgmq.send(${q}::text, '{}'::jsonb) as id`;
  const read = await sql`select * from pgmq.read(${q}::text, 30, 10)`;
  assert.deepEqual(read.map((r) => r.msg_id), [id]);
  const [{ vts }] = await sql.unsafe(
    `select count(distinct vt)::int as vts from pgmq.q_${q} where msg_id in (1, 2)`,
  );
  assert.equal(vts, 1);
}, { ignore: BEFORE_15 });

db.test("23 [1.5] send_batch pairs headers with messages by position", async ({ sql }) => {
  const q = await queue(sql, "t_batchhdr");
  await sql`
    select * from pgmq.send_batch(${q}::text, array['{"m":1}'::jsonb, '{"m":2}'::jsonb],
      array['{"h":1}'::jsonb, '{"h":2}'::jsonb])`;
  await sql`
    select * from pgmq.send_batch(${q}::text, array['{"m":3}'::jsonb, '{"m":4}'::jsonb],
      array['{"h":3}'::jsonb], 0)`;
  await sql`
    select * from pgmq.send_batch(${q}::text, array['{"m":5}'::jsonb],
      array['{"h":5}'::jsonb], now() - interval '1 second')`;
  const rows = await sql`select message, headers from pgmq.read(${q}::text, 30, 10)`;
  const pairs = rows.map((r) => [r.message.m, r.headers?.h ?? null]).sort((a, b) => a[0] - b[0]);
  assert.deepEqual(pairs, [[1, 1], [2, 2], [3, 3], [4, null], [5, 5]]);
}, { ignore: BEFORE_15 });

db.test("24 [all] sending to a queue that was never created fails with 42P01", async ({ sql }) => {
  const q = freshQueue("t_missing");
  await assert.rejects(
    () => sql`select pgmq.send(${q}::text, '{}'::jsonb)`,
    pgError("42P01", `relation "pgmq.q_${q}" does not exist`),
  );
  await assert.rejects(
    () => sql`select * from pgmq.send_batch(${q}::text, array['{}'::jsonb])`,
    pgError("42P01"),
  );
});
