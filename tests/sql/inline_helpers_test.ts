/**
 * The policy for internal helpers (supabase/schemas/0090_inline_helpers.sql, docs/design.md,
 * Internal helpers), checked over the catalog: every pgflow function pins search_path = '' or is
 * one of that file's helpers (language sql, stable, not strict, no setting, not security definer,
 * granted to no role); a helper is called only by functions that pin search_path and that no role
 * but the owner runs with its own rights, and from no default, view or constraint; and Postgres
 * really inlines them: a task's whole path, counted by Postgres's function statistics, calls none.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

const HELPERS_FILE = "supabase/schemas/0090_inline_helpers.sql";
const helperSource = Deno.readTextFileSync(`${REPO_ROOT}${HELPERS_FILE}`);
/** The helpers, as their file defines them. */
const HELPERS = [...helperSource.matchAll(/create or replace function pgflow\.(\w+)\s*\(/gi)]
  .map((m) => m[1]);

interface Fn {
  name: string;
  fn: string;
  lang: string;
  volatility: string;
  strict: boolean;
  definer: boolean;
  config: string[] | null;
  src: string;
  grantees: string[];
  defaultAcl: boolean;
}

async function pgflowFunctions(sql: Sql): Promise<Fn[]> {
  return await sql<Fn[]>`
    select p.proname::text as name, p.oid::regprocedure::text as fn, l.lanname::text as lang,
           p.provolatile::text as volatility, p.proisstrict as strict, p.prosecdef as definer,
           p.proconfig as config, p.prosrc as src, p.proacl is null as "defaultAcl",
           coalesce((select array_agg(coalesce(r.rolname::text, 'PUBLIC') order by 1)
                     from aclexplode(p.proacl) a left join pg_roles r on r.oid = a.grantee
                     where a.grantee <> p.proowner), '{}') as grantees
    from pg_proc p join pg_language l on l.oid = p.prolang
    where p.pronamespace = 'pgflow'::regnamespace`;
}

const pinned = (f: Fn) => (f.config ?? []).includes('search_path=""');

/** Whether `text` calls the helper `name`. */
const calls = (text: string, name: string) =>
  new RegExp(`\\bpgflow\\.${name}\\s*\\(`, "i").test(text);

db.test("every pgflow function pins search_path = '' or is an inline helper of the kind the policy allows", async ({ sql }) => {
  assert.ok(HELPERS.length >= 15, `${HELPERS_FILE} defines ${HELPERS.length} helpers`);
  const functions = await pgflowFunctions(sql);
  assert.ok(functions.length > 60, `found ${functions.length} functions`);
  const problems: string[] = [];
  for (const f of functions.filter((f) => !pinned(f))) {
    const say = (what: string) => problems.push(`${f.fn}: ${what}`);
    if (!HELPERS.includes(f.name)) {
      say(`pins no search_path and is not a helper of ${HELPERS_FILE}`);
    }
    if (f.lang !== "sql") say(`is language ${f.lang}, not sql`);
    if (f.volatility !== "s") say(`is not stable (provolatile ${f.volatility})`);
    if (f.strict) say("is strict");
    if (f.definer) say("is security definer");
    if (f.config !== null) say(`has settings ${f.config}`);
    if (f.defaultAcl || f.grantees.length > 0) {
      say(`is executable by ${f.defaultAcl ? "PUBLIC (default)" : f.grantees.join(", ")}`);
    }
    const body = f.src.replace(/--[^\n]*/g, "").trim();
    if (!/^select\b/i.test(body) || /;\s*\S/.test(body)) say("is not one SELECT");
  }
  for (const name of HELPERS) {
    const found = functions.filter((f) => f.name === name);
    if (found.length !== 1) problems.push(`${name}: ${found.length} functions of that name`);
    else if (pinned(found[0])) problems.push(`${name}: a helper pins its search_path`);
  }
  assert.deepEqual(problems, []);
});

db.test("a helper is called only by pinned functions that run as the owner, never from a default, view or constraint", async ({ sql }) => {
  const functions = await pgflowFunctions(sql);
  // Roles other than the owner and superusers that may run each function with their own rights.
  const runners = await sql<{ fn: string; roles: string[] }[]>`
    select p.oid::regprocedure::text as fn, array_agg(r.rolname::text order by 1) as roles
    from pg_proc p cross join pg_roles r
    where p.pronamespace = 'pgflow'::regnamespace and not p.prosecdef
      and r.oid <> p.proowner and not r.rolsuper and r.rolname !~ '^pg_'
      and has_function_privilege(r.oid, p.oid, 'execute')
    group by p.oid`;
  const runBy = new Map(runners.map((r) => [r.fn, r.roles]));
  const problems: string[] = [];
  let callers = 0;
  for (const f of functions.filter((f) => !HELPERS.includes(f.name))) {
    const used = HELPERS.filter((h) => calls(f.src, h));
    if (used.length === 0) continue;
    callers++;
    if (!pinned(f)) problems.push(`${f.fn} calls ${used} and pins no search_path`);
    const roles = runBy.get(f.fn);
    if (roles) problems.push(`${f.fn} calls ${used} and ${roles} may run it with their own rights`);
  }
  assert.ok(callers >= 20, `${callers} functions call a helper`);

  // Expressions the catalog keeps outside function bodies: parameter defaults, column defaults,
  // constraints, views (run by their caller, under the caller's search_path).
  const expressions = await sql<{ what: string; text: string }[]>`
    select 'defaults of ' || p.oid::regprocedure::text as what, pg_get_function_arguments(p.oid) as text
    from pg_proc p where p.pronamespace = 'pgflow'::regnamespace
    union all
    select 'default of ' || d.adrelid::regclass::text, pg_get_expr(d.adbin, d.adrelid)
    from pg_attrdef d join pg_class c on c.oid = d.adrelid
    where c.relnamespace = 'pgflow'::regnamespace
    union all
    select 'constraint ' || c.conname::text, pg_get_constraintdef(c.oid)
    from pg_constraint c where c.connamespace = 'pgflow'::regnamespace
    union all
    select 'view ' || v.schemaname || '.' || v.viewname, v.definition
    from pg_views v where v.schemaname not in ('pg_catalog', 'information_schema')`;
  for (const e of expressions) {
    const used = HELPERS.filter((h) => calls(e.text, h));
    if (used.length > 0) problems.push(`${e.what} calls ${used}`);
  }
  assert.deepEqual(problems, []);
});

/**
 * One transaction through most of the engine: a run of a chain with a condition, a map and a
 * skipped last step; a single-step run completed by complete_tasks; a message another live worker
 * serves (hand-back) and a read past; explicit pairs; a failure; stalled recovery; a listener and
 * its barrier; coverage, the fence's status and the keep-alive. Returns the pgflow functions it
 * called, with their call counts.
 */
async function walkThePath(
  sql: Sql,
  tag: string,
  before?: (tx: Sql) => Promise<unknown>,
): Promise<Map<string, number>> {
  let called = new Map<string, number>();
  // Rolled back at the end, whatever happened: the walk leaves nothing behind.
  await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    await before?.(tx);
    called = await walk(tx, tag);
    throw rollback;
  }).catch((e) => {
    if (e !== rollback) throw e;
  });
  return called;
}

const rollback = new Error("rollback");

/** The columns of pgflow.claim_row the walk reads. */
interface ReadRow {
  msg_id: string;
  disposition: string;
  run_id: string;
  step_slug: string;
  task_index: number;
  input: unknown;
  attempt: number;
  next_read_qty: number | null;
}

async function walk(tx: Sql, tag: string): Promise<Map<string, number>> {
  const q = `ih_${tag}_q`;
  const chain = `ih_${tag}_chain`;
  const one = `ih_${tag}_one`;
  const other = `ih_${tag}_other`;
  await tx`select pgflow.create_flow(${chain}, 1, 1, 60, 'routed')`;
  await tx`select pgflow.add_step(flow_slug => ${chain}, step_slug => 'a', queue_name => ${q})`;
  await tx`select pgflow.add_step(flow_slug => ${chain}, step_slug => 'b', deps_slugs => '{a}',
    required_input_pattern => '{"a": {"go": true}}', queue_name => ${q})`;
  await tx`select pgflow.add_step(flow_slug => ${chain}, step_slug => 'm', deps_slugs => '{b}',
    step_type => 'map', queue_name => ${q})`;
  await tx`select pgflow.add_step(flow_slug => ${chain}, step_slug => 'c', deps_slugs => '{m}',
    required_input_pattern => '{"m": ["never"]}', queue_name => ${q})`;
  for (const flow of [one, other]) {
    await tx`select pgflow.create_flow(${flow}, 1, 1, 60, 'routed')`;
    await tx`select pgflow.add_step(flow_slug => ${flow}, step_slug => 'a', queue_name => ${q})`;
  }
  const worker = crypto.randomUUID();
  const peer = crypto.randomUUID();
  const mine = [[chain, "a"], [chain, "b"], [chain, "m"], [chain, "c"], [one, "a"]];
  await tx`select pgflow.register_worker(${worker}::uuid, ${q}, 'ih_fn', ${tx.json(mine)})`;
  await tx`select pgflow.register_worker(${peer}::uuid, ${q}, 'ih_peer', ${
    tx.json([[other, "a"]])
  })`;

  const read = (qty: number, readQty: number | null = null) =>
    tx<
      ReadRow[]
    >`select msg_id, disposition, run_id, step_slug, task_index, input, attempt, next_read_qty
         from pgflow.read_and_claim(${q}, ${worker}::uuid, 30, ${qty}, 0, 50, null, ${readQty})`;
  const carry = (
    rows: { run_id: string; step_slug: string; task_index: number; attempt: number }[],
    outputs: unknown[],
  ) =>
    tx<ReadRow[]>`select msg_id, disposition, run_id, step_slug, task_index, input, attempt
         from pgflow.complete_and_claim(
           ${rows.map((r) => r.run_id)}::uuid[], ${rows.map((r) => r.step_slug)}::text[],
           ${rows.map((r) => r.task_index)}::int[],
           ${outputs.map((o) => JSON.stringify(o))}::text[]::jsonb[],
           ${rows.map((r) => r.attempt)}::int[], ${q}, ${worker}::uuid, 30, 10)`;

  // A listener on the queue and on the run: every announce finds a waiter.
  await tx`select pgflow.listen_start(array[${`pgflow_queue:${q}`}])`;
  await tx`select pgflow.listen_barrier(array[${`pgflow_queue:${q}`}])`;

  // Another flow's message first (the peer serves it: handed back), then the chain's run.
  await tx`select pgflow.start_flow(${other}, '{}')`;
  const [run] = await tx`select run_id from pgflow.start_flow(${chain}, '{"n": 1}')`;
  await tx`select pgflow.listen_start(array[${`pgflow_run:${run.run_id}`}])`;
  const first = await read(1);
  assert.deepEqual(first.map((r) => r.disposition), ["handed_back"]);
  assert.ok((first[0].next_read_qty ?? 0) > 1, "told to read past the handed-back message");
  const [a] = (await read(1, first[0].next_read_qty)).filter((r) => r.disposition === "claimed");
  assert.deepEqual([a.step_slug, a.input], ["a", { n: 1 }]);

  // a's completion carried: b's condition holds on a's output, b is claimed with it.
  const [b] = (await carry([a], [{ go: true }])).filter((r) => r.disposition === "claimed");
  assert.deepEqual([b.step_slug, b.input], ["b", { a: { go: true } }]);
  // b's completion carried: m maps over b's output.
  const ms = (await carry([b], [["x", "y"]])).filter((r) => r.disposition === "claimed");
  assert.deepEqual(ms.map((r) => r.input), ["x", "y"]);
  // m completes; c's condition does not hold: c is skipped, which completes the run.
  await tx`select count(*) from pgflow.complete_tasks(
      ${ms.map((r) => r.run_id)}::uuid[], ${ms.map((r) => r.step_slug)}::text[],
      ${ms.map((r) => r.task_index)}::int[], array['1', '2']::jsonb[], ${
    ms.map((r) => r.attempt)
  }::int[])`;
  const [done] = await tx`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  // Its one leaf, c, was skipped: an empty output.
  assert.deepEqual([done.status, done.output], ["completed", {}]);

  // A single-step run, claimed with explicit pairs, completed by complete_tasks.
  const [single] = await tx`select run_id from pgflow.start_flow(${one}, '{"k": 2}')`;
  const msgs = await tx`select msg_id from pgmq.read(${q}, 30, 10)`;
  const claimed = await tx`select run_id, step_slug, task_index, attempt, disposition
      from pgflow.start_tasks(${q}, ${msgs.map((m) => m.msg_id)}::bigint[], ${worker}::uuid,
                              ${tx.json([[one, "a"]])})
      where disposition = 'claimed'`;
  assert.equal(claimed.length, 1);
  await tx`select count(*) from pgflow.complete_tasks(array[${single.run_id}]::uuid[], array['a'],
      array[0], array['3'::jsonb], array[${claimed[0].attempt}]::int[])`;
  // A failed attempt: the run fails (one attempt).
  const [failing] = await tx`select run_id from pgflow.start_flow(${one}, '{}')`;
  const [f] = (await read(10)).filter((r) => r.disposition === "claimed");
  await tx`select count(*) from pgflow.fail_task(${failing.run_id}::uuid, 'a', 0, 'boom', ${f.attempt}::int)`;

  // Maintenance and operator reads.
  await tx`select pgflow.requeue_stalled_tasks()`;
  await tx`select count(*) from pgflow.queue_coverage(${q})`;
  await tx`select count(*) from pgflow.queue_coverage()`;
  await tx`select count(*) from pgflow.ensure_workers()`;
  await tx`select pgflow.heartbeat(${worker}::uuid)`;
  await tx`select pgflow._refresh_queue_statistics(${q}, 1000)`;

  const rows = await tx<{ name: string; calls: number }[]>`
      select funcname::text as name, calls::int as calls from pg_stat_xact_user_functions
      where schemaname = 'pgflow'`;
  return new Map(rows.map((r) => [r.name, r.calls]));
}

db.test("a task's path inlines every helper: the function statistics count no call of one", async ({ sql }) => {
  const called = await walkThePath(sql, "path");
  for (
    const expected of [
      "_start_tasks",
      "_hand_back",
      "_read_past_qty",
      "_claim_limit_split",
      "_explicit_support",
      "_announce",
      "_run_changed",
      "_start_ready_steps",
      "complete_tasks",
    ]
  ) {
    assert.ok(called.has(expected), `the path ran ${expected}: ${[...called.keys()]}`);
  }
  assert.deepEqual(HELPERS.filter((h) => called.has(h)), [], "helpers Postgres called");
});

db.test("the check sees a helper that is not inlined: one with a setting of its own is called", async ({ sql }) => {
  // The same walk with two helpers made uninlinable, in its transaction (rolled back with it).
  const called = await walkThePath(sql, "control", async (tx) => {
    await tx`alter function pgflow._run_output(uuid) set search_path = ''`;
    await tx`alter function pgflow._worker_live(pgflow.workers, timestamptz) set search_path = ''`;
  });
  assert.ok((called.get("_run_output") ?? 0) > 0, "_run_output is called");
  assert.ok((called.get("_worker_live") ?? 0) > 0, "_worker_live is called");
});

db.test("EXPLAIN VERBOSE of a caller's statement shows the helpers' bodies, not the helpers", async ({ sql }) => {
  const plan = async (statement: string) =>
    (await sql.unsafe(`explain (verbose, costs off) ${statement}`)).map((r) => r["QUERY PLAN"])
      .join("\n");
  const live = await plan(`
    select w.worker_id from pgflow.workers w
    where w.queue_name = 'q' and pgflow._worker_live(w, clock_timestamp() - pgflow._live_window())
      and w.supported_keys ? pgflow._pair_key('f', 's')`);
  assert.match(live, /last_heartbeat_at > \(clock_timestamp\(\) - '00:00:30'::interval\)/);
  assert.match(live, /deprecated_at IS NULL/);
  assert.ok(live.includes("'f\u001fs'"), "the pair key folded to its value");
  const output = await plan(`
    select r.run_id, (select o from pgflow._run_output(r.run_id) o) from pgflow.runs r`);
  assert.match(output, /jsonb_object_agg/);
  for (const text of [live, output]) {
    assert.deepEqual(HELPERS.filter((h) => text.includes(h)), [], text);
  }
});
