/**
 * Privileges and hardening, read from the catalog: no pgflow function is executable by PUBLIC (so
 * not by anon or authenticated on Supabase), every function pins search_path, and dynamic SQL
 * quotes identifiers.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

db.test("every pgflow function pins search_path to ''", async ({ sql }) => {
  const rows = await sql`
    select p.oid::regprocedure::text as fn, p.proconfig
    from pg_proc p where p.pronamespace = 'pgflow'::regnamespace`;
  assert.ok(rows.length > 30, `found ${rows.length} functions`);
  const unpinned = rows.filter((r) => !(r.proconfig ?? []).includes('search_path=""'));
  assert.deepEqual(unpinned.map((r) => r.fn), []);
});

db.test("no pgflow function is executable by PUBLIC, anon or authenticated", async ({ sql }) => {
  await sql.unsafe(`
    do $$ begin
      if not exists (select 1 from pg_roles where rolname = 'anon') then create role anon nologin; end if;
      if not exists (select 1 from pg_roles where rolname = 'authenticated') then create role authenticated nologin; end if;
    end $$;`);
  const rows = await sql`
    select p.oid::regprocedure::text as fn, r.rolname
    from pg_proc p cross join (values ('anon'), ('authenticated')) as r(rolname)
    where p.pronamespace = 'pgflow'::regnamespace
      and has_function_privilege(r.rolname, p.oid, 'execute')`;
  assert.deepEqual(rows.map((r) => `${r.rolname}: ${r.fn}`), []);
  const publicAcl = await sql`
    select p.oid::regprocedure::text as fn from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace
      and (p.proacl is null or exists (select 1 from aclexplode(p.proacl) a where a.grantee = 0))`;
  assert.deepEqual(publicAcl.map((r) => r.fn), [], "no default (PUBLIC) execute grant remains");
});

db.test("an unprivileged role cannot start flows or claim tasks", async ({ sql, connect }) => {
  await sql.unsafe(`do $$ begin
    if not exists (select 1 from pg_roles where rolname = 'pgflow_intruder') then create role pgflow_intruder nologin; end if;
  end $$; grant usage on schema pgflow to pgflow_intruder;`);
  const intruder = connect();
  await intruder`set role pgflow_intruder`;
  for (
    const call of [
      "pgflow.start_flow('x', '{}')",
      "pgflow.start_tasks('q', '{1}', gen_random_uuid(), '[]')",
    ]
  ) {
    const error = await intruder.unsafe(`select ${call}`).then(() => undefined, (e: Error) => e);
    assert.match(String(error), /permission denied for function start_(flow|tasks)/, call);
  }
});

db.test("dynamic SQL in pgflow quotes every identifier", async ({ sql }) => {
  const rows = await sql`
    select p.proname, p.prosrc from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace and p.prosrc ~* 'execute'`;
  for (const r of rows) {
    for (const stmt of r.prosrc.match(/execute\s+[^;]+/gi) ?? []) {
      // Either a constant string with bind parameters, or format() with %I for identifiers.
      assert.ok(
        !/%s/.test(stmt) && !/\|\|\s*(queue|p_queue|name)/i.test(stmt),
        `${r.proname}: ${stmt}`,
      );
    }
  }
});

db.test("every dynamic execute is a constant with bind parameters or format() with only %I / %L", async ({ sql }) => {
  const rows = await sql`
    select p.oid::regprocedure::text as fn, p.prosrc from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace and p.prolang = (select oid from pg_language where lanname = 'plpgsql')`;
  let seen = 0;
  for (const r of rows) {
    // Comments may mention the word; only statements count.
    const src = (r.prosrc as string).replace(/--[^\n]*/g, "");
    for (const match of src.matchAll(/\bexecute\s+/gi)) {
      const rest = src.slice(match.index! + match[0].length);
      seen++;
      const constant = /^('([^']|'')*'|\$(\w*)\$[\s\S]*?\$\3\$)\s*((into|using)\b[^;]*)?;/.exec(
        rest,
      );
      const formatted = /^format\s*\(\s*'((?:[^']|'')*)'/.exec(rest);
      if (constant) continue;
      assert.ok(
        formatted,
        `${r.fn}: execute neither a constant nor format(): ${rest.slice(0, 80)}`,
      );
      const placeholders = formatted[1].match(/%[^%]/g) ?? [];
      assert.deepEqual(
        placeholders.filter((p) => p !== "%I" && p !== "%L"),
        [],
        `${r.fn}: format() must quote with %I or %L: ${formatted[1]}`,
      );
    }
  }
  assert.ok(seen >= 3, `found ${seen} dynamic statements`);
});
