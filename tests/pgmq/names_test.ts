// Queue names: normalisation, validation, error texts and injection.
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  errorCode,
  freshQueue,
  isInvalidCharsError,
  pgError,
  pgmqTarget,
  relationExists,
} from "./helpers.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

const TOO_LONG_CLONE = "queue name is too long, maximum length is 48 characters";

function name(length: number, seed = freshQueue("n").replaceAll("_", "")): string {
  return (seed + "x".repeat(length)).slice(0, length).toLowerCase();
}

db.test("5 [all] 47 characters are accepted, 48 are too long", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  const ok = name(47);
  await sql`select pgmq.create(${ok}::text)`;
  assert.ok(await relationExists(sql, `pgmq.q_${ok}`));
  assert.ok(await relationExists(sql, `pgmq.a_${ok}`));
  const [{ id }] = await sql`select pgmq.send(${ok}::text, '{}'::jsonb) as id`;
  assert.equal(Number(id), 1);

  const long = name(48);
  await assert.rejects(
    () => sql`select pgmq.create(${long}::text)`,
    target.extension
      ? pgError("P0001", /^queue name is too long/)
      : pgError("P0001", TOO_LONG_CLONE),
  );
  assert.equal(await relationExists(sql, `pgmq.q_${long}`), false);
  assert.equal((await sql`select 1 from pgmq.meta where queue_name = ${long}`).length, 0);
  for (const fn of ["create_unlogged", "create_partitioned"]) {
    await assert.rejects(
      () => sql.unsafe(`select pgmq.${fn}($1::text)`, [long]),
      pgError("P0001", /^queue name is too long/),
    );
  }
});

db.test("5 [all] validate_queue_name checks the length only", async ({ sql }) => {
  const target = await pgmqTarget(sql);
  await sql`select pgmq.validate_queue_name(${name(47)}::text)`;
  await sql`select pgmq.validate_queue_name(null::text)`;
  await sql`select pgmq.validate_queue_name('x$y'::text)`; // characters are not its business
  await assert.rejects(
    () => sql`select pgmq.validate_queue_name(${name(48)}::text)`,
    target.extension
      ? pgError("P0001", /^queue name is too long/)
      : pgError("P0001", TOO_LONG_CLONE),
  );
});

db.test("6 [all] format_table_name lowercases prefix_name and nothing else", async ({ sql }) => {
  const [r] = await sql`
    select pgmq.format_table_name('Cat-Dog', 'a') as a,
           pgmq.format_table_name('cat', 'q') as q,
           pgmq.format_table_name(' Sp ace ', 'q') as s,
           pgmq.format_table_name(null, 'q') as n`;
  assert.deepEqual({ ...r }, { a: "a_cat-dog", q: "q_cat", s: "q_ sp ace ", n: null });
  await assert.rejects(
    () => sql`select pgmq.format_table_name('x$y', 'q')`,
    isInvalidCharsError,
  );
});

const BAD_NAMES = ["x$y", "x;y", "a;b", "x--y", "x'y"];

db.test("7 [all] $, ;, -- and ' are rejected by create, send and delete", async ({ sql }) => {
  for (const bad of BAD_NAMES) {
    await assert.rejects(() => sql`select pgmq.create(${bad}::text)`, isInvalidCharsError, bad);
    await assert.rejects(
      () => sql`select pgmq.send(${bad}::text, '{}'::jsonb)`,
      isInvalidCharsError,
      bad,
    );
    await assert.rejects(
      () => sql`select pgmq.delete(${bad}::text, 1::bigint)`,
      isInvalidCharsError,
      bad,
    );
  }
  const rows = await sql`select 1 from pgmq.meta where queue_name = any(${BAD_NAMES}::text[])`;
  assert.equal(rows.length, 0);
});

db.test("7 [all] every function taking a queue name rejects invalid characters", async ({ sql }) => {
  const calls = [
    "select pgmq.create_unlogged($1::text)",
    "select pgmq.create_non_partitioned($1::text)",
    "select pgmq.create_partitioned($1::text)",
    "select pgmq.drop_queue($1::text)",
    "select * from pgmq.send_batch($1::text, array['{}'::jsonb])",
    "select * from pgmq.read($1::text, 30, 1)",
    "select * from pgmq.read_with_poll($1::text, 30, 1, 1, 100)",
    "select * from pgmq.pop($1::text)",
    "select * from pgmq.set_vt($1::text, 1::bigint, 10)",
    "select pgmq.archive($1::text, 1::bigint)",
    "select * from pgmq.archive($1::text, array[1]::bigint[])",
    "select * from pgmq.delete($1::text, array[1]::bigint[])",
    "select pgmq.purge_queue($1::text)",
    "select * from pgmq.metrics($1::text)",
  ];
  for (const call of calls) {
    for (const bad of ["x$y", "a;b"]) {
      await assert.rejects(() => sql.unsafe(call, [bad]), isInvalidCharsError, `${call} ${bad}`);
    }
  }
});

db.test("7 [all] an injection-style name leaves nothing behind", async ({ sql }) => {
  const victim = freshQueue("abc");
  await sql`select pgmq.create(${victim}::text)`;
  const injected =
    `${victim} where false; create table public.pwn(i int); delete from pgmq.q_${victim}`;
  await sql`select pgmq.send(${victim}::text, '{}'::jsonb)`;
  for (const call of ["create", "drop_queue", "purge_queue", "metrics"]) {
    await assert.rejects(
      () => sql.unsafe(`select pgmq.${call}($1::text)`, [injected]),
      isInvalidCharsError,
    );
  }
  await assert.rejects(
    () => sql`select pgmq.send(${injected}::text, '{}'::jsonb)`,
    isInvalidCharsError,
  );
  assert.equal(await relationExists(sql, "public.pwn"), false);
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.q_${victim}`);
  assert.equal(n, 1);
});

/** Counts the victim's messages and lists every table in the database, to detect side effects. */
async function snapshot(sql: postgres.Sql, victim: string) {
  const [{ n }] = await sql.unsafe(`select count(*)::int as n from pgmq.q_${victim}`);
  const [{ a }] = await sql.unsafe(`select count(*)::int as a from pgmq.a_${victim}`);
  const tables = await sql`
    select n.nspname || '.' || c.relname as t from pg_class c
    join pg_namespace n on n.oid = c.relnamespace
    where c.relkind in ('r', 'p', 'u') and n.nspname not in ('pg_catalog', 'information_schema')
    order by 1`;
  const meta = await sql`select queue_name from pgmq.meta order by 1`;
  return { n, a, tables: tables.map((t) => t.t), meta: meta.map((m) => m.queue_name) };
}

db.test("[all] double-quote injections through every function have no effect", async ({ sql }) => {
  const victim = freshQueue("victim");
  await sql`select pgmq.create(${victim}::text)`;
  await sql`select pgmq.send_batch(${victim}::text, array['{"a":1}'::jsonb, '{"a":2}'::jsonb])`;
  const before = await snapshot(sql, victim);
  // None of these contain $, ; , -- or ', so only correct identifier quoting stops them.
  const payloads = [
    `${victim}", pgmq."a_${victim}`,
    `${victim}" cascade`,
    `${victim}" where true or "x`,
    `x" (i int) inherits (pgmq."q_${victim}`,
    `${victim}"."x`,
  ];
  const calls = [
    "select pgmq.create($1::text)",
    "select pgmq.create_unlogged($1::text)",
    "select pgmq.drop_queue($1::text)",
    "select pgmq.purge_queue($1::text)",
    "select * from pgmq.read($1::text, 30, 10)",
    "select * from pgmq.pop($1::text)",
    "select * from pgmq.set_vt($1::text, 1::bigint, 100)",
    "select pgmq.archive($1::text, 1::bigint)",
    "select pgmq.delete($1::text, 1::bigint)",
    "select * from pgmq.delete($1::text, array[1, 2]::bigint[])",
    "select * from pgmq.metrics($1::text)",
  ];
  for (const payload of payloads) {
    for (const call of calls) {
      // Either an error (no such relation, bad name) or a harmless result; never a side effect.
      try {
        await sql.unsafe(call, [payload]);
      } catch (e) {
        assert.ok(errorCode(e), `${call} with ${payload}: ${e}`);
      }
      // Payloads that are legal names may create their own queue; drop it to compare state.
      const rows = await sql`select 1 from pgmq.meta where queue_name = ${payload}`;
      if (rows.length) await sql`select pgmq.drop_queue(${payload}::text)`;
    }
  }
  assert.deepEqual(await snapshot(sql, victim), before);
});

db.test("8 [all] a too-long name with $ gets the character error first", async ({ sql }) => {
  const bad = name(47) + "$";
  assert.equal(bad.length, 48);
  await assert.rejects(() => sql`select pgmq.create(${bad}::text)`, isInvalidCharsError);
});

db.test("[all] a NULL queue name cannot be formatted as an identifier", async ({ sql }) => {
  await assert.rejects(
    () => sql`select pgmq.create(null::text)`,
    (e) => /null values cannot be formatted as an SQL identifier/.test(String(e)),
  );
});
