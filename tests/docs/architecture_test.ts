/**
 * ARCHITECTURE.md's "The path of one task" stays true: every file its tables name exists and
 * defines the functions and triggers its row names, the file counts it states are its tables', and
 * every pgflow function and trigger that a task's path calls in a real database (one transaction,
 * counted by Postgres's function statistics) is named there.
 */
import assert from "node:assert/strict";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const architecture = Deno.readTextFileSync(`${REPO_ROOT}ARCHITECTURE.md`);
const HEADING = "## The path of one task";

/** The section, from its heading to the next. */
function pathSection(): string {
  const start = architecture.indexOf(`${HEADING}\n`);
  assert.ok(start >= 0, `ARCHITECTURE.md has a section "${HEADING.slice(3)}"`);
  const end = architecture.indexOf("\n## ", start + HEADING.length);
  return architecture.slice(start, end < 0 ? undefined : end);
}

interface PathRow {
  readonly file: string;
  readonly names: readonly string[];
}

/** The rows of the section's tables whose file cell names a file; `successful`: the first table. */
function pathRows(section: string, only?: "successful"): PathRow[] {
  const tables = section.split(/\n\*\*[^*]+\*\*\n/).slice(1);
  assert.ok(tables.length >= 2, "the section has the successful path's table and the failure's");
  const rows: PathRow[] = [];
  for (const table of only === "successful" ? tables.slice(0, 1) : tables) {
    // Rows as written (backticks kept): the header and separator rows name no file.
    const lines = table.split("\n").filter((l) => l.startsWith("|"));
    for (const cells of lines.map((l) => l.split("|").slice(1, -1))) {
      const file = /^`([^`]+)`$/.exec(cells[1]?.trim() ?? "")?.[1];
      if (file === undefined) continue;
      rows.push({ file, names: [...cells[2].matchAll(/`([^`]+)`/g)].map((m) => m[1]) });
    }
  }
  return rows;
}

const escape = (s: string) => s.replace(/[.*+?^${}()|[\]\\#]/g, "\\$&");

/** Whether `source` (of `file`) defines `name` as its table row writes it. */
function defines(file: string, source: string, name: string): boolean {
  if (file.endsWith(".sql")) {
    const fn = /^pgflow\.(\w+)$/.exec(name);
    return fn !== null
      ? new RegExp(`create or replace function pgflow\\.${fn[1]}\\s*\\(`, "i").test(source)
      : new RegExp(`create (or replace )?(constraint )?trigger ${escape(name)}\\b`, "i").test(
        source,
      );
  }
  const member = /^(\w+)\.(#?\w+)$/.exec(name);
  if (member !== null) {
    const [, owner, method] = member;
    return new RegExp(`\\bclass ${owner}\\b`).test(source) &&
      new RegExp(`^\\s+(?:async\\s+|static\\s+|get\\s+)*${escape(method)}\\s*[(<]`, "m").test(
        source,
      );
  }
  return new RegExp(`\\b(?:function\\*?|class|const|let)\\s+${escape(name)}\\b`).test(source);
}

Deno.test("ARCHITECTURE.md's task path: every file it names exists and defines what its row names", () => {
  const rows = pathRows(pathSection());
  assert.ok(rows.length >= 20, `found ${rows.length} rows`);
  const problems: string[] = [];
  for (const { file, names } of rows) {
    let source: string;
    try {
      source = Deno.readTextFileSync(`${REPO_ROOT}${file}`);
    } catch {
      problems.push(`${file} does not exist`);
      continue;
    }
    if (names.length === 0) problems.push(`${file}: its row names nothing`);
    for (const name of names) {
      if (!defines(file, source, name)) problems.push(`${file} does not define ${name}`);
    }
  }
  assert.deepEqual(problems, []);
});

Deno.test("ARCHITECTURE.md's task path: the file counts it states are its table's", () => {
  const section = pathSection();
  const files = new Set(pathRows(section, "successful").map((r) => r.file));
  const ts = [...files].filter((f) => f.endsWith(".ts")).length;
  const sql = [...files].filter((f) => f.endsWith(".sql")).length;
  const stated = /reads in (\d+) TypeScript files and (\d+) SQL files/.exec(section);
  assert.ok(stated !== null, "the section says how many files the path reads in");
  assert.deepEqual([Number(stated[1]), Number(stated[2])], [ts, sql]);
});

db.test("ARCHITECTURE.md's task path names every pgflow function and trigger a task's path calls", async ({ sql }) => {
  const section = pathSection();
  const named = new Set(pathRows(section).flatMap((r) => r.names));
  const queue = "arch_path";
  await defineFlow(sql, "arch_ok", [{ slug: "a", queue }, { slug: "b", deps: ["a"], queue }], {
    mode: "routed",
  });
  await defineFlow(sql, "arch_fail", [{ slug: "a", queue }], { mode: "routed", maxAttempts: 1 });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}::uuid, ${queue}, 'arch_fn',
    ${sql.json([["arch_ok", "a"], ["arch_ok", "b"], ["arch_fail", "a"]])})`;

  const called = await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    // A run of two steps: started, a claimed, a carried with the read that claims b, b completed.
    const [ok] = await tx`select run_id from pgflow.start_flow('arch_ok', '{}')`;
    const [a] = await tx`select run_id, attempt, disposition
      from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, 10, 0)`;
    assert.equal(a?.disposition, "claimed");
    const [b] = await tx`select run_id, attempt, disposition from pgflow.complete_and_claim(
      array[${a.run_id}]::uuid[], array['a'], array[0], array['{"x": 1}'::jsonb],
      array[${a.attempt}]::int[], ${queue}, ${worker}::uuid, 30, 10)`;
    assert.equal(b?.disposition, "claimed", "b was released and claimed in the same call");
    await tx`select count(*) from pgflow.complete_tasks(array[${b.run_id}]::uuid[], array['b'],
      array[0], array['1'::jsonb], array[${b.attempt}]::int[])`;
    const [run] = await tx`select status from pgflow.runs where run_id = ${ok.run_id}`;
    assert.equal(run.status, "completed");
    // A run whose only attempt fails.
    const [bad] = await tx`select run_id from pgflow.start_flow('arch_fail', '{}')`;
    const [f] =
      await tx`select attempt from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, 10, 0)`;
    await tx`select pgflow.fail_task(${bad.run_id}::uuid, 'a', 0, 'boom', ${f.attempt}::int)`;
    const [failed] = await tx`select status from pgflow.runs where run_id = ${bad.run_id}`;
    assert.equal(failed.status, "failed");
    return await tx<{ name: string }[]>`
      select funcname::text as name from pg_stat_xact_user_functions
      where schemaname = 'pgflow' order by 1`;
  });
  const calledNames = called.map((r) => `pgflow.${r.name}`);
  for (const expected of ["pgflow.start_flow", "pgflow._start_tasks", "pgflow.complete_tasks"]) {
    assert.ok(calledNames.includes(expected), `the statistics saw ${expected}: ${calledNames}`);
  }
  assert.deepEqual(
    calledNames.filter((n) => !named.has(n)),
    [],
    "called, but not in ARCHITECTURE.md",
  );

  const triggers = await sql<{ name: string }[]>`
    select t.tgname::text as name from pg_trigger t
    where not t.tgisinternal
      and t.tgrelid in ('pgflow.runs'::regclass, 'pgflow.step_states'::regclass,
                        'pgflow.step_tasks'::regclass)`;
  assert.ok(triggers.length >= 3, `found ${triggers.length} triggers`);
  assert.deepEqual(
    triggers.map((t) => t.name).filter((n) => !named.has(n)),
    [],
    "a trigger on the path's tables, not in ARCHITECTURE.md",
  );
});
