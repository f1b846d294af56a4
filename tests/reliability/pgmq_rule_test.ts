/**
 * The PGMQ rule (docs/design.md, The PGMQ rule): the engine reads and writes queue rows only
 * through PGMQ's public functions, plus direct pruning of archive rows; the two stated exceptions
 * are the statistics refresh (LOCK and ANALYZE of a queue table, no row access) and the operator
 * view that reads msg_id, vt and read_ct of a queue table. Read from the installed functions'
 * source (so the shipped migration is what is checked) and from src/.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);
const SRC = new URL("../../src/", import.meta.url);

/**
 * Each function allowed to name a PGMQ table, and exactly the format() strings it may build with
 * one. Adding a function here is changing the rule: change docs/design.md with it.
 */
const TABLE_ACCESS: Record<string, { formats: readonly string[]; kind: "q" | "a" }> = {
  // The statistics refresh: the table's oid, its lock (never waited for), ANALYZE.
  _refresh_queue_statistics: {
    kind: "q",
    formats: [
      "pgmq.%I",
      "lock table pgmq.%I in share update exclusive mode nowait",
      "analyze pgmq.%I (msg_id, vt)",
    ],
  },
  // Archive pruning, for which PGMQ has no function.
  _purge_tracked_messages: { kind: "a", formats: ["delete from pgmq.%I where msg_id = any ($1)"] },
  prune_shared_queue_archive: {
    kind: "a",
    formats: [
      "with gone as (delete from pgmq.%I where archived_at < now() - $1 returning 1) select count(*) from gone",
    ],
  },
};

/** Every place a pgflow function's source names PGMQ, comments removed. */
function pgmqUses(source: string) {
  const code = source.replace(/--[^\n]*/g, "");
  // Without string literals: an error's hint may mention a table, which is no use of it.
  const statements = code.replace(/'(?:[^']|'')*'/g, "''");
  return {
    calls: [...statements.matchAll(/\bpgmq\.(\w+)\s*\(/g)].map((m) => m[1]),
    names: [...statements.matchAll(/\bpgmq\.(\w+)\b(?!\s*\()/g)].map((m) => m[1]),
    formats: [...code.matchAll(/format\s*\(\s*'((?:[^']|'')*pgmq\.(?:[^']|'')*)'/g)].map((m) =>
      m[1].replaceAll("''", "'")
    ),
    tableKinds: [...code.matchAll(/format_table_name\s*\([^()]*,\s*'(\w)'\s*\)/g)].map((m) => m[1]),
    concatenated: /'pgmq\.'\s*\|\||\bpgmq\.[qa]_/.test(code),
  };
}

db.test("pgflow's SQL touches PGMQ's tables only where the PGMQ rule allows", async ({ sql }) => {
  const functions = await sql<{ name: string; source: string }[]>`
    select p.proname::text as name, p.prosrc as source
    from pg_proc p where p.pronamespace = 'pgflow'::regnamespace`;
  const pgmqFunctions = new Set(
    (await sql<{ name: string }[]>`
      select p.proname::text as name from pg_proc p
      where p.pronamespace = 'pgmq'::regnamespace`).map((r) => r.name),
  );
  // Standalone types (pgmq.message_record), not the row types of PGMQ's tables.
  const pgmqTypes = new Set(
    (await sql<{ name: string }[]>`
      select t.typname::text as name from pg_type t
      left join pg_class c on c.oid = t.typrelid
      where t.typnamespace = 'pgmq'::regnamespace and (c.oid is null or c.relkind = 'c')`)
      .map((r) => r.name),
  );
  const problems: string[] = [];
  const seen = new Set<string>();
  for (const fn of functions) {
    const uses = pgmqUses(fn.source);
    for (const call of uses.calls) {
      if (call.startsWith("_") || !pgmqFunctions.has(call)) {
        problems.push(`${fn.name} calls pgmq.${call}, which is not one of PGMQ's public functions`);
      }
    }
    for (const name of uses.names) {
      if (!pgmqTypes.has(name)) {
        problems.push(`${fn.name} names pgmq.${name}, not a function or type`);
      }
    }
    if (uses.concatenated) problems.push(`${fn.name} builds a PGMQ table name by hand`);
    const allowed = TABLE_ACCESS[fn.name];
    for (const format of uses.formats) {
      if (allowed?.formats.includes(format)) seen.add(`${fn.name}: ${format}`);
      else problems.push(`${fn.name} builds ${JSON.stringify(format)} on a PGMQ table`);
    }
    if (allowed !== undefined) {
      for (const kind of uses.tableKinds) {
        if (kind !== allowed.kind) problems.push(`${fn.name} names a queue's '${kind}' table`);
      }
    }
  }
  assert.deepEqual(problems, []);
  // The exceptions are still there as the rule states them (else the rule and this list are stale).
  const expected = Object.entries(TABLE_ACCESS).flatMap(([fn, a]) =>
    a.formats.map((f) => `${fn}: ${f}`)
  );
  assert.deepEqual([...seen].sort(), expected.sort());
});

/** Every .ts file under `dir`, as paths relative to src/. */
function tsFiles(dir: URL, prefix = ""): string[] {
  return [...Deno.readDirSync(dir)].flatMap((e) =>
    e.isDirectory
      ? tsFiles(new URL(`${e.name}/`, dir), `${prefix}${e.name}/`)
      : e.name.endsWith(".ts")
      ? [`${prefix}${e.name}`]
      : []
  );
}

/** The operator view allowed to read a queue table, and the columns it may read. */
const OPERATOR_VIEW = "cli/dashboard/waits.ts";
const VIEW_COLUMNS = new Set(["msg_id", "vt", "read_ct"]);

Deno.test("src/ names a PGMQ table only in the operator view the PGMQ rule allows", () => {
  const tableReference =
    /\b(?:from|join|into|update|table|analyze)\s+pgmq\.\w+\b(?!\s*\()|pgmq\.(?:[qa]_|%I|\$\{)/gi;
  const found: string[] = [];
  let viewReads = 0;
  for (const file of tsFiles(SRC)) {
    const code = Deno.readTextFileSync(new URL(file, SRC))
      .split("\n")
      .filter((line) => !/^\s*(\*|\/\/|\/\*)/.test(line))
      .join("\n");
    for (const m of code.matchAll(tableReference)) {
      if (file !== OPERATOR_VIEW) found.push(`${file}: ${m[0]}`);
    }
    if (file !== OPERATOR_VIEW) continue;
    // Every statement of the view that reads a queue table selects only the allowed columns.
    for (const [, table] of code.matchAll(/const (\w+) = tx\(`pgmq\./g)) {
      const reads = new RegExp(
        `select\\s+((?:(?!select\\b)[\\s\\S])*?)\\s+from\\s+\\$\\{${table}\\}`,
        "g",
      );
      for (const m of code.matchAll(reads)) {
        viewReads++;
        const columns = m[1].split(",").map((c) => c.trim().replace(/::\w+$/, ""));
        for (const c of columns) {
          assert.ok(VIEW_COLUMNS.has(c), `${file} reads ${c} of a queue table`);
        }
      }
    }
  }
  assert.deepEqual(found, []);
  assert.equal(viewReads, 1, `${OPERATOR_VIEW} reads a queue table once`);
});
