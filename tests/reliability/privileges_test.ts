/**
 * Privileges and hardening, read from the catalog: no pgflow function is executable by PUBLIC (so
 * not by anon or authenticated on Supabase), every function but the inline helpers pins
 * search_path (the helpers' own policy: tests/sql/inline_helpers_test.ts), and dynamic SQL
 * quotes identifiers.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { tableRows } from "../docs/markdown.ts";
import { REPO_ROOT } from "../package/deno_cmd.ts";

const db = testDatabase(import.meta.url);

// The inline helpers of 0090_inline_helpers.sql pin none, by design: the policy they follow
// instead is checked by tests/sql/inline_helpers_test.ts.
const HELPERS = [
  ...Deno.readTextFileSync(`${REPO_ROOT}supabase/schemas/0090_inline_helpers.sql`)
    .matchAll(/create or replace function pgflow\.(\w+)\s*\(/gi),
].map((m) => m[1]);

db.test("every pgflow function but the inline helpers pins search_path to ''", async ({ sql }) => {
  const rows = await sql`
    select p.proname, p.oid::regprocedure::text as fn, p.proconfig
    from pg_proc p where p.pronamespace = 'pgflow'::regnamespace`;
  assert.ok(rows.length > 30, `found ${rows.length} functions`);
  assert.ok(HELPERS.length > 0, "0090_inline_helpers.sql defines helpers");
  const unpinned = rows.filter((r) =>
    !(r.proconfig ?? []).includes('search_path=""') && !HELPERS.includes(r.proname)
  );
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
      "pgflow.start_flows('x', '[{}]')",
      "pgflow.start_tasks('q', '{1}', gen_random_uuid(), '[]')",
    ]
  ) {
    const error = await intruder.unsafe(`select ${call}`).then(() => undefined, (e: Error) => e);
    assert.match(String(error), /permission denied for function start_(flows?|tasks)/, call);
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

/** A connection acting as `role` (the test server's superuser may become any role). */
async function actingAs(connect: () => import("postgres").Sql, role: string) {
  const conn = connect();
  await conn.unsafe(`set role ${role}`);
  return conn;
}

async function supabaseRoles(sql: import("postgres").Sql) {
  await sql.unsafe(`do $$ begin
    if not exists (select 1 from pg_roles where rolname = 'anon') then create role anon nologin; end if;
    if not exists (select 1 from pg_roles where rolname = 'authenticated') then create role authenticated nologin; end if;
  end $$;`);
}

db.test("service_role may start a flow and read its runs, and nothing more", async ({ sql, connect }) => {
  await supabaseRoles(sql);
  await sql`select pgflow.create_flow('granted_flow')`;
  await sql`select pgflow.add_step('granted_flow', 'a')`;
  // The migration creates service_role where Supabase has not (plain Postgres), so the model is
  // the same everywhere.
  assert.equal(
    (await sql`select count(*)::int as n from pg_roles where rolname = 'service_role'`)[0].n,
    1,
  );

  const service = await actingAs(connect, "service_role");
  // supabase-js: rpc('start_flow', ...) and from('runs').select() run exactly these as service_role.
  const [run] = await service`select * from pgflow.start_flow('granted_flow', '{"n": 1}')`;
  assert.equal(run.status, "started");
  const [read] = await service`select status, input from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual(read, { status: "started", input: { n: 1 } });
  const steps = await service`select s.step_slug, s.status, t.status as task
    from pgflow.step_states s join pgflow.step_tasks t using (run_id, step_slug)
    where s.run_id = ${run.run_id}`;
  assert.deepEqual(steps.map((s) => `${s.step_slug}:${s.status}:${s.task}`), ["a:started:queued"]);
  assert.equal(
    (await sql`select count(*)::int as n from pgmq.q_granted_flow`)[0].n,
    1,
    "the task's message was sent for it",
  );
  // Everything else stays with the owner.
  for (
    const call of [
      "select pgflow.complete_task(gen_random_uuid(), 'a', 0, '1', 1)",
      "select pgflow.fail_task(gen_random_uuid(), 'a', 0, 'x', 1)",
      "select * from pgflow.read_and_claim('granted_flow', gen_random_uuid(), 5, 1, 0)",
      "select pgflow.delete_flow_and_data('granted_flow')",
      "select pgflow.create_flow('service_made')",
      "select pgflow.register_worker(gen_random_uuid(), 'q', 'fn')",
      "select pgflow.set_local_development(true)",
      "update pgflow.runs set status = 'completed'",
      "insert into pgflow.flows (flow_slug) values ('x')",
      "select * from pgflow.workers",
      "select * from pgflow.settings",
    ]
  ) {
    await assert.rejects(() => service.unsafe(call), /permission denied/, call);
  }
});

db.test("anon and authenticated can neither start flows nor read runs", async ({ sql, connect }) => {
  await supabaseRoles(sql);
  await sql`select pgflow.create_flow('closed_flow')`;
  for (const role of ["anon", "authenticated"]) {
    const conn = await actingAs(connect, role);
    for (
      const call of [
        "select pgflow.start_flow('closed_flow', '{}')",
        "select * from pgflow.runs",
        "select * from pgflow.step_tasks",
      ]
    ) {
      await assert.rejects(() => conn.unsafe(call), /permission denied/, `${role}: ${call}`);
    }
  }
});

db.test("the grants to service_role are exactly docs/permissions.md's table", async ({ sql }) => {
  const rows = tableRows(
    await Deno.readTextFile(new URL("../../docs/permissions.md", import.meta.url)),
    "service_role is granted",
  );
  assert.ok(rows.length > 10, `docs/permissions.md's table has ${rows.length} rows`);
  const documented = (grant: string) => rows.filter(([g]) => g === grant);

  // Functions: the documented signatures, read by the database itself (timestamptz and
  // "timestamp with time zone" are one type), with who they run as.
  const listed = documented("execute");
  const resolved = await sql<{ fn: string; definer: boolean }[]>`
    select p.oid::regprocedure::text as fn, p.prosecdef as definer
    from unnest(${listed.map(([, on]) => on)}::text[]) with ordinality d(sig, i)
    cross join lateral (select to_regprocedure(d.sig) as oid) r
    left join pg_proc p on p.oid = r.oid
    order by d.i`;
  resolved.forEach((r, i) =>
    assert.ok(r.fn !== null, `docs/permissions.md names ${listed[i][1]}, which does not exist`)
  );
  const granted = await sql<{ fn: string; definer: boolean }[]>`
    select p.oid::regprocedure::text as fn, p.prosecdef as definer from pg_proc p
    where p.pronamespace = 'pgflow'::regnamespace
      and has_function_privilege('service_role', p.oid, 'execute')
    order by 1`;
  const asDoc = resolved.map((r, i) => `${r.fn} runs as ${listed[i][2]}`).sort();
  assert.deepEqual(
    granted.map((g) => `${g.fn} runs as ${g.definer ? "owner" : "caller"}`),
    asDoc,
  );

  // Tables: every privilege service_role holds on a pgflow table, and only those.
  const tables = await sql`
    select c.relname, lower(a.privilege_type) as privilege
    from pg_class c cross join lateral aclexplode(c.relacl) a
    where c.relnamespace = 'pgflow'::regnamespace and a.grantee = 'service_role'::regrole
    order by 1, 2`;
  assert.deepEqual(
    tables.map((t) => `${t.privilege} pgflow.${t.relname}`),
    rows.filter(([g, on]) => g !== "execute" && on.startsWith("pgflow."))
      .map(([g, on]) => `${g} ${on}`).sort(),
  );

  // The schema: usage, not create.
  const [schema] = await sql`
    select has_schema_privilege('service_role', 'pgflow', 'usage') as usage,
           has_schema_privilege('service_role', 'pgflow', 'create') as create`;
  assert.deepEqual({ ...schema }, { usage: true, create: false });
  assert.deepEqual(documented("usage").map(([, on]) => on), ["schema `pgflow`"]);
});
