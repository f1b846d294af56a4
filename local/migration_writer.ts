/**
 * Writes the next migration from the schema files: what `deno task migration:new` runs.
 *
 * The migrations are applied to one scratch database (`released`: what every database that is up
 * to date has) and the schema files to another (`declared`: what it should have). Their catalogs
 * (`tests/support/catalog.ts`) are compared, and each difference becomes statements, in passes:
 *
 * 1. removals: functions, triggers, policies, views, indexes and constraints the schema files no
 *    longer have are dropped (tables, columns and types are not: that drops data, so it is left to a
 *    person);
 * 2. columns added to existing tables (`alter table ... add column`), changed defaults and NOT NULL;
 * 3. new types, sequences and tables and new or changed functions, in schema-file order, copied from
 *    the schema file as written, comments included (`create function` becomes `create or replace`;
 *    a function whose return type or parameter names changed is dropped first);
 * 4. constraints; 5. indexes, views and triggers; 6. row-level security and policies;
 * 7. privileges, default privileges and comments.
 *
 * Every statement is applied to `released` as it is written, and each pass reads the catalog
 * again, so later passes see what earlier ones did (a new table's own grants, say). What is still
 * different at the end is listed as "to write by hand", naming the object. Finally the migration as
 * written is applied on top of the migrations in a fresh database and compared once more.
 *
 * @module
 */
import type postgres from "postgres";
import { type CatalogSnapshot, catalogSnapshot, diffCatalogs } from "../tests/support/catalog.ts";
import { applyMigrations, applySchemaFiles } from "./migrate.ts";
import { withScratchDatabase } from "./scratch_db.ts";
import { splitStatements } from "./sql_statements.ts";

/** Options of {@link generateMigration}. */
export interface GenerateOptions {
  /** A server on which scratch databases may be created and dropped (never a production one). */
  serverUrl: string;
  /** The declarative schema folder (`supabase/schemas/`). */
  schemasDir: string;
  /** The migrations folder: every file in it counts, released or draft. */
  migrationsDir: string;
  /** A database with PGMQ only, cloned for each scratch database; default: install PGMQ each time. */
  pgmqTemplate?: string;
  /** The schema compared; default `pgflow`. */
  schema?: string;
}

/** The migration {@link generateMigration} wrote. */
export interface GeneratedMigration {
  /** The statements (no header); empty when the schema files and migrations agree. */
  body: string;
  /** One line per change the body makes, naming the object. */
  changes: string[];
  /** What is still different and must be written by hand, one line per object, with why. */
  byHand: string[];
}

type Sql = postgres.Sql;

interface SchemaStatement {
  file: string;
  order: number;
  text: string;
  comment: string;
}

interface Section {
  /** Sort key within its pass: schema-file order for statements copied from a file. */
  order: number;
  header: string;
  sql: string;
}

interface Ctx {
  schema: string;
  released: Sql;
  declared: Sql;
  declaredCatalog: CatalogSnapshot;
  statements: SchemaStatement[];
  sections: Section[];
  changes: string[];
  byHand: Map<string, string>;
}

interface Drift {
  key: string;
  kind: string;
  name: string;
  released?: string;
  declared?: string;
}

// Longest first: a key is `<kind> <name>`.
const KINDS = [
  "default privileges",
  "row security",
  "constraint",
  "function",
  "trigger",
  "comment",
  "column",
  "policy",
  "index",
  "table",
  "grant",
  "type",
  "view",
];

function parseKey(key: string): { kind: string; name: string } {
  const kind = KINDS.find((k) => key.startsWith(`${k} `));
  if (!kind) throw new Error(`unknown catalog key ${key}`);
  return { kind, name: key.slice(kind.length + 1) };
}

/** Splits `a.b."c.d"` into its identifiers, quotes kept. */
function idents(name: string): string[] {
  const parts: string[] = [];
  let cur = "";
  let quoted = false;
  for (const ch of name) {
    if (ch === '"') quoted = !quoted;
    if (ch === "." && !quoted) {
      parts.push(cur);
      cur = "";
    } else cur += ch;
  }
  parts.push(cur);
  return parts;
}

const literal = (s: string) => `'${s.replaceAll("'", "''")}'`;
const unquote = (s: string) => s.startsWith('"') ? s.slice(1, -1).replaceAll('""', '"') : s;
const escapeRe = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
const identRe = (s: string) => s.startsWith('"') ? escapeRe(s) : `"?${escapeRe(s)}"?`;

async function drift(ctx: Ctx): Promise<Drift[]> {
  const released = await catalogSnapshot(ctx.released, ctx.schema);
  const out: Drift[] = [];
  for (const key of new Set([...released.keys(), ...ctx.declaredCatalog.keys()])) {
    const r = released.get(key);
    const d = ctx.declaredCatalog.get(key);
    if (r === d) continue;
    out.push({ key, ...parseKey(key), released: r, declared: d });
  }
  return out.sort((a, b) => a.key.localeCompare(b.key));
}

/** The SQLSTATE of a database error, if it is one. */
function sqlState(err: unknown): string | undefined {
  return (err as { code?: string }).code;
}

const message = (err: unknown) => err instanceof Error ? err.message : String(err);

/** Runs `sql` on the released database inside a savepoint: on failure nothing of it stays. */
async function attempt(ctx: Ctx, sql: string): Promise<void> {
  await ctx.released.unsafe("savepoint attempt").simple();
  try {
    await ctx.released.unsafe(sql).simple();
  } catch (err) {
    await ctx.released.unsafe("rollback to savepoint attempt").simple();
    throw err;
  }
  await ctx.released.unsafe("release savepoint attempt").simple();
}

/** Applies `sql` to the released database; records it on success. */
async function emit(ctx: Ctx, change: string, header: string, sql: string, order = 1e9) {
  await attempt(ctx, sql);
  ctx.sections.push({ order, header, sql });
  ctx.changes.push(change);
}

/** Like {@link emit}, but a failure is recorded as work left for a person. */
async function tryEmit(
  ctx: Ctx,
  key: string,
  change: string,
  header: string,
  sql: string,
  order?: number,
): Promise<boolean> {
  try {
    await emit(ctx, change, header, sql, order);
    return true;
  } catch (err) {
    ctx.byHand.set(key, `${key}: ${change} failed (${message(err)}); write it by hand`);
    return false;
  }
}

function findStatement(ctx: Ctx, re: RegExp): SchemaStatement | undefined {
  const found = ctx.statements.filter((s) => re.test(s.text));
  return found.length === 1 ? found[0] : undefined;
}

function copied(s: SchemaStatement, object: string): { header: string; sql: string } {
  return {
    header: `-- ---- schemas/${s.file}: ${object}${s.comment ? `\n${s.comment}` : ""}`,
    sql: s.text,
  };
}

// ---- pass 1: removals

async function removals(ctx: Ctx, all: Drift[]) {
  for (const d of all.filter((d) => d.declared === undefined)) {
    const parts = idents(d.name);
    const header = `-- ---- ${d.kind} ${d.name}: no longer in the schema files`;
    const table = parts.slice(0, 2).join(".");
    // The parts of a table that is gone go with it (and the table is left to a person).
    const partOfTable = ["column", "constraint", "trigger", "policy"].includes(d.kind);
    if (partOfTable && !ctx.declaredCatalog.has(`table ${table}`)) continue;
    switch (d.kind) {
      case "function":
        await tryEmit(ctx, d.key, `drop function ${d.name}`, header, `drop function ${d.name};`);
        break;
      case "trigger":
        await tryEmit(
          ctx,
          d.key,
          `drop trigger ${d.name}`,
          header,
          `drop trigger ${parts[2]} on ${table};`,
        );
        break;
      case "policy":
        await tryEmit(
          ctx,
          d.key,
          `drop policy ${d.name}`,
          header,
          `drop policy ${parts[2]} on ${table};`,
        );
        break;
      case "view": {
        const materialized = d.released?.startsWith("m") ? "materialized " : "";
        await tryEmit(
          ctx,
          d.key,
          `drop view ${d.name}`,
          header,
          `drop ${materialized}view ${d.name};`,
        );
        break;
      }
      case "index": {
        const [{ owned }] = await ctx.released<{ owned: boolean }[]>`
          select exists (select 1 from pg_constraint where conindid = to_regclass(${d.name})) as owned`;
        if (!owned) {
          await tryEmit(ctx, d.key, `drop index ${d.name}`, header, `drop index ${d.name};`);
        }
        break;
      }
      case "constraint":
        await tryEmit(
          ctx,
          d.key,
          `drop constraint ${d.name}`,
          header,
          `alter table ${table} drop constraint ${parts[2]};`,
        );
        break;
      case "table":
      case "column":
      case "type":
        ctx.byHand.set(
          d.key,
          `${d.key}: only in the migrations; dropping it drops data, so write the drop by hand`,
        );
    }
  }
}

// ---- pass 2: columns of existing tables

interface ColumnInfo {
  relkind: string;
  type: string;
  notnull: boolean;
  def: string | null;
  identity: string;
  generated: string;
}

async function columnInfo(sql: Sql, name: string): Promise<ColumnInfo | undefined> {
  const [schema, table, column] = idents(name).map(unquote);
  const rows = await sql<ColumnInfo[]>`
    select c.relkind::text as relkind, format_type(a.atttypid, a.atttypmod) as type,
           a.attnotnull as notnull, pg_get_expr(d.adbin, d.adrelid) as def,
           a.attidentity::text as identity, a.attgenerated::text as generated
    from pg_attribute a join pg_class c on c.oid = a.attrelid
    join pg_namespace n on n.oid = c.relnamespace
    left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
    where n.nspname = ${schema} and c.relname = ${table} and a.attname = ${column}
      and not a.attisdropped`;
  return rows[0];
}

async function columns(ctx: Ctx, all: Drift[]) {
  for (const d of all.filter((d) => d.kind === "column" && d.declared !== undefined)) {
    const parts = idents(d.name);
    const table = parts.slice(0, 2).join(".");
    const want = await columnInfo(ctx.declared, d.name);
    const have = await columnInfo(ctx.released, d.name);
    if (!want || !["r", "p"].includes(want.relkind)) continue; // a view's: the view pass
    if (!have) {
      // The table itself is new: pass 3 creates it whole.
      const [{ exists }] = await ctx.released<{ exists: boolean }[]>`
        select to_regclass(${table}) is not null as exists`;
      if (!exists) continue;
      if (want.identity || want.generated) {
        ctx.byHand.set(d.key, `${d.key}: a new identity or generated column; write it by hand`);
        continue;
      }
      if (want.notnull && want.def === null) {
        ctx.byHand.set(
          d.key,
          `${d.key}: a new NOT NULL column without a default; existing rows need a value, so ` +
            "write it by hand (add it, fill it, then set not null)",
        );
        continue;
      }
      const sql = `alter table ${table} add column ${parts[2]} ${want.type}` +
        (want.def !== null ? ` default ${want.def}` : "") + (want.notnull ? " not null" : "") + ";";
      await tryEmit(ctx, d.key, `add column ${d.name}`, `-- ---- column ${d.name}: new`, sql);
      continue;
    }
    if (
      have.type !== want.type || have.identity !== want.identity ||
      have.generated !== want.generated
    ) {
      ctx.byHand.set(
        d.key,
        `${d.key}: type, identity or generation changed (${have.type} -> ${want.type}); ` +
          "existing values must be converted, so write it by hand",
      );
      continue;
    }
    const alter = `alter table ${table} alter column ${parts[2]}`;
    if (have.def !== want.def) {
      await tryEmit(
        ctx,
        d.key,
        `column ${d.name}: default ${want.def ?? "dropped"}`,
        `-- ---- column ${d.name}: default`,
        want.def === null ? `${alter} drop default;` : `${alter} set default ${want.def};`,
      );
    }
    if (have.notnull !== want.notnull) {
      await tryEmit(
        ctx,
        d.key,
        `column ${d.name}: ${want.notnull ? "not null (fails if a row has NULL)" : "nullable"}`,
        `-- ---- column ${d.name}: ${want.notnull ? "not null" : "nullable"}`,
        `${alter} ${want.notnull ? "set" : "drop"} not null;`,
      );
    }
  }
}

// ---- pass 3: types, sequences, tables and functions, in schema-file order

async function definitions(ctx: Ctx, all: Drift[]) {
  const items: { d: Drift; statement?: SchemaStatement }[] = [];
  for (const d of all.filter((d) => d.declared !== undefined)) {
    const [, obj] = idents(d.name.replace(/\(.*$/, ""));
    const schema = escapeRe(ctx.schema);
    let re: RegExp | undefined;
    if (d.kind === "function") {
      re = new RegExp(
        `^create\\s+(or\\s+replace\\s+)?(function|procedure)\\s+"?${schema}"?\\.${
          identRe(obj)
        }\\s*\\(`,
        "i",
      );
    } else if (d.kind === "type" && d.released === undefined) {
      re = new RegExp(`^create\\s+type\\s+"?${schema}"?\\.${identRe(obj)}\\s`, "i");
    } else if (d.kind === "table" && d.released === undefined && /^[rpS] /.test(d.declared!)) {
      re = d.declared!.startsWith("S")
        ? new RegExp(
          `^create\\s+sequence\\s+(if\\s+not\\s+exists\\s+)?"?${schema}"?\\.${identRe(obj)}\\b`,
          "i",
        )
        : new RegExp(
          `^create\\s+(unlogged\\s+)?table\\s+(if\\s+not\\s+exists\\s+)?"?${schema}"?\\.${
            identRe(obj)
          }\\s*\\(`,
          "i",
        );
    } else continue;
    items.push({ d, statement: findStatement(ctx, re) });
  }
  const orderOf = (s?: SchemaStatement) => s ? s.order : 1e9;
  items.sort((x, y) => orderOf(x.statement) - orderOf(y.statement));
  for (const { d, statement } of items) {
    if (d.kind === "function") {
      await defineFunction(ctx, d, statement);
      continue;
    }
    // A sequence an identity or serial column owns came with its table.
    const [{ exists }] = await ctx.released<{ exists: boolean }[]>`
      select case when ${d.kind} = 'type' then to_regtype(${d.name}) is not null
                  else to_regclass(${d.name}) is not null end as exists`;
    if (exists) continue;
    if (!statement) {
      ctx.byHand.set(
        d.key,
        `${d.key}: new, but no single "create ${
          d.kind === "table" ? "table" : d.kind
        }" statement for it was found in the schema files; write it by hand`,
      );
      continue;
    }
    const { header, sql } = copied(statement, d.name);
    await tryEmit(ctx, d.key, `create ${d.key}`, header, sql, statement.order);
  }
}

/** pg_get_functiondef of the function a catalog key names (`schema.name(identity arguments)`). */
async function functionDef(sql: Sql, name: string): Promise<string | undefined> {
  const open = name.indexOf("(");
  const [schema, fn] = idents(name.slice(0, open)).map(unquote);
  const args = name.slice(open + 1, -1);
  const rows = await sql<{ def: string }[]>`
    select pg_get_functiondef(p.oid) as def from pg_proc p join pg_namespace n on n.oid = p.pronamespace
    where n.nspname = ${schema} and p.proname = ${fn}
      and pg_get_function_identity_arguments(p.oid) = ${args}`;
  return rows[0]?.def;
}

async function defineFunction(ctx: Ctx, d: Drift, statement?: SchemaStatement) {
  const want = await functionDef(ctx.declared, d.name);
  if (!want) return;
  const isNew = d.released === undefined;
  const change = `${isNew ? "create" : "replace"} function ${d.name}`;
  const candidates: { header: string; sql: string; order?: number }[] = [];
  if (statement) {
    const c = copied(statement, d.name);
    candidates.push({
      header: c.header,
      sql: c.sql.replace(/^create\s+(function|procedure)/i, "create or replace $1"),
      order: statement.order,
    });
  }
  candidates.push({
    header: `-- ---- function ${d.name} (as the schema files define it)`,
    sql: `${want.trimEnd()};`,
    order: statement?.order,
  });
  let lastError: unknown;
  for (const c of candidates) {
    for (const dropFirst of [false, true]) {
      if (dropFirst && isNew) break;
      const sql = dropFirst ? `drop function ${d.name};\n${c.sql}` : c.sql;
      await ctx.released.unsafe("savepoint candidate").simple();
      try {
        await ctx.released.unsafe(sql).simple();
        if ((await functionDef(ctx.released, d.name)) !== want) {
          // The file's statement is not the final definition (a later file replaces it).
          await ctx.released.unsafe("rollback to savepoint candidate").simple();
          break;
        }
        await ctx.released.unsafe("release savepoint candidate").simple();
        const note = dropFirst
          ? "\n-- Its return type or parameter names changed: it is dropped and created again."
          : "";
        ctx.sections.push({ order: c.order ?? 1e9, header: c.header + note, sql });
        ctx.changes.push(change + (dropFirst ? " (dropped and created again)" : ""));
        return;
      } catch (err) {
        lastError = err;
        await ctx.released.unsafe("rollback to savepoint candidate").simple();
        // 42P13: cannot change return type, parameter names or defaults in place; 42809: kind.
        if (!["42P13", "42809"].includes(sqlState(err) ?? "")) break;
      }
    }
  }
  ctx.byHand.set(
    d.key,
    `${d.key}: ${change} failed (${
      lastError ? message(lastError) : "no statement gives its definition"
    }); write it by hand`,
  );
}

// ---- pass 4: constraints

async function constraints(ctx: Ctx, all: Drift[]) {
  for (const d of all.filter((d) => d.kind === "constraint" && d.declared !== undefined)) {
    const parts = idents(d.name);
    const table = parts.slice(0, 2).join(".");
    const add = `add constraint ${parts[2]} ${d.declared}`;
    const sql = d.released === undefined
      ? `alter table ${table} ${add};`
      : `alter table ${table} drop constraint ${parts[2]}, ${add};`;
    await tryEmit(
      ctx,
      d.key,
      `${
        d.released === undefined ? "add" : "replace"
      } constraint ${d.name} (existing rows must satisfy it)`,
      `-- ---- constraint ${d.name}: ${d.released === undefined ? "new" : "changed"}`,
      sql,
    );
  }
}

// ---- pass 5: indexes, views, triggers

async function indexesViewsTriggers(ctx: Ctx, all: Drift[]) {
  for (const d of all.filter((d) => d.declared !== undefined)) {
    const parts = idents(d.name);
    if (d.kind === "index") {
      const [{ owned }] = await ctx.declared<{ owned: boolean }[]>`
        select exists (select 1 from pg_constraint where conindid = to_regclass(${d.name})) as owned`;
      if (owned) continue; // made by its constraint
      const drop = d.released === undefined ? "" : `drop index ${d.name};\n`;
      const statement = findStatement(
        ctx,
        new RegExp(
          `^create\\s+(unique\\s+)?index\\s+(concurrently\\s+)?(if\\s+not\\s+exists\\s+)?${
            identRe(parts[1])
          }\\s+on\\s`,
          "i",
        ),
      );
      const header = statement
        ? copied(statement, d.name).header
        : `-- ---- index ${d.name}: ${drop ? "changed" : "new"}`;
      const change = `${drop ? "rebuild" : "create"} index ${d.name}`;
      if (statement && !drop) {
        await ctx.released.unsafe("savepoint candidate").simple();
        try {
          await ctx.released.unsafe(statement.text).simple();
          const [{ def }] = await ctx.released<{ def: string | null }[]>`
            select pg_get_indexdef(to_regclass(${d.name})) as def`;
          if (def === d.declared) {
            await ctx.released.unsafe("release savepoint candidate").simple();
            ctx.sections.push({ order: 1e9, header, sql: statement.text });
            ctx.changes.push(change);
            continue;
          }
        } catch { /* the generated definition below */ }
        await ctx.released.unsafe("rollback to savepoint candidate").simple();
      }
      await tryEmit(ctx, d.key, change, header, `${drop}${d.declared};`);
    } else if (d.kind === "view") {
      const [{ relkind }] = await ctx.declared<{ relkind: string }[]>`
        select relkind::text from pg_class where oid = to_regclass(${d.name})`;
      if (relkind === "m") {
        ctx.byHand.set(d.key, `${d.key}: a materialized view; write it by hand`);
        continue;
      }
      const body = `${d.declared!.trim().replace(/;$/, "")};`;
      const replace = `create or replace view ${d.name} as\n${body}`;
      try {
        await emit(ctx, `create or replace view ${d.name}`, `-- ---- view ${d.name}`, replace);
      } catch {
        await tryEmit(
          ctx,
          d.key,
          `drop and create view ${d.name}`,
          `-- ---- view ${d.name}: its columns changed, so it is dropped and created again`,
          `drop view ${d.name};\ncreate view ${d.name} as\n${body}`,
        );
      }
    } else if (d.kind === "trigger") {
      const drop = d.released === undefined
        ? ""
        : `drop trigger ${parts[2]} on ${parts.slice(0, 2).join(".")};\n`;
      await tryEmit(
        ctx,
        d.key,
        `${drop ? "replace" : "create"} trigger ${d.name}`,
        `-- ---- trigger ${d.name}`,
        `${drop}${d.declared};`,
      );
    }
  }
}

// ---- pass 6: row-level security and policies

async function rowSecurity(ctx: Ctx, all: Drift[]) {
  for (const d of all.filter((d) => d.declared !== undefined)) {
    if (d.kind === "row security") {
      const sql: string[] = [];
      const was = d.released ?? "disabled";
      const enabled = d.declared!.startsWith("enabled");
      const forced = d.declared!.includes("forced");
      if (was.startsWith("enabled") !== enabled) {
        sql.push(`alter table ${d.name} ${enabled ? "enable" : "disable"} row level security;`);
      }
      if (was.includes("forced") !== forced) {
        sql.push(`alter table ${d.name} ${forced ? "force" : "no force"} row level security;`);
      }
      if (sql.length) {
        await tryEmit(
          ctx,
          d.key,
          `row security ${d.name}: ${d.declared}`,
          `-- ---- row security ${d.name}: ${d.declared}`,
          sql.join("\n"),
        );
      }
    } else if (d.kind === "policy") {
      const [schema, table, policy] = idents(d.name);
      const [p] = await ctx.declared<
        {
          permissive: string;
          cmd: string;
          roles: string[];
          qual: string | null;
          with_check: string | null;
        }[]
      >`select permissive, cmd, roles::text[] as roles, qual, with_check from pg_policies
        where schemaname = ${unquote(schema)} and tablename = ${unquote(table)}
          and policyname = ${unquote(policy)}`;
      const roles = p.roles.map((r) => r === "public" ? "public" : quoteIdent(r)).join(", ");
      const create =
        `create policy ${policy} on ${schema}.${table} as ${p.permissive.toLowerCase()}` +
        ` for ${p.cmd.toLowerCase()} to ${roles}` + (p.qual !== null ? ` using (${p.qual})` : "") +
        (p.with_check !== null ? ` with check (${p.with_check})` : "") + ";";
      const drop = d.released === undefined ? "" : `drop policy ${policy} on ${schema}.${table};\n`;
      await tryEmit(
        ctx,
        d.key,
        `${drop ? "replace" : "create"} policy ${d.name}`,
        `-- ---- policy ${d.name}`,
        drop + create,
      );
    }
  }
}

function quoteIdent(s: string): string {
  return /^[a-z_][a-z0-9_$]*$/.test(s) ? s : `"${s.replaceAll('"', '""')}"`;
}

// ---- pass 7: privileges, default privileges, comments

const PRIVILEGES: Record<string, string> = {
  r: "select",
  a: "insert",
  w: "update",
  d: "delete",
  D: "truncate",
  x: "references",
  t: "trigger",
  m: "maintain",
  X: "execute",
  U: "usage",
  C: "create",
  c: "connect",
  T: "temporary",
};

/** An ACL string of the catalog (`none`, or sorted aclitems) as grantee → privileges. */
function parseAcl(acl: string | undefined): Map<string, { plain: string[]; withGrant: string[] }> {
  const out = new Map<string, { plain: string[]; withGrant: string[] }>();
  if (!acl || acl === "none") return out;
  for (
    const item of acl.match(/("(?:[^"]|"")*"|[^=,]*)=([A-Za-z*]*)\/("(?:[^"]|"")*"|[^,]*)/g) ?? []
  ) {
    const m = /^("(?:[^"]|"")*"|[^=]*)=([A-Za-z*]*)\//.exec(item)!;
    const grantee = m[1] === "" ? "public" : m[1];
    const entry = out.get(grantee) ?? { plain: [], withGrant: [] };
    for (const [, letter, star] of m[2].matchAll(/([A-Za-z])(\*?)/g)) {
      const name = PRIVILEGES[letter] ?? letter;
      (star ? entry.withGrant : entry.plain).push(name);
    }
    out.set(grantee, entry);
  }
  return out;
}

/** The grants and revokes that turn ACL `from` into ACL `to` on `object` (`on ...` / `(col) on ...`). */
function aclStatements(
  from: string | undefined,
  to: string | undefined,
  grantTarget: (privs: string) => string,
  revokeTarget: string,
  owner: string,
): string[] {
  const a = parseAcl(from);
  const b = parseAcl(to);
  const sql: string[] = [];
  for (const grantee of [...new Set([...a.keys(), ...b.keys()])].sort()) {
    const x = a.get(grantee);
    const y = b.get(grantee);
    if (JSON.stringify(x) === JSON.stringify(y)) continue;
    // The owner is whoever runs the migration: named so, not by the scratch server's role name.
    const role = grantee === owner ? "current_user" : grantee;
    const lines: string[] = [];
    if (x) lines.push(`revoke all ${revokeTarget} from ${role};`);
    if (y?.plain.length) lines.push(`grant ${grantTarget(y.plain.join(", "))} to ${role};`);
    if (y?.withGrant.length) {
      lines.push(`grant ${grantTarget(y.withGrant.join(", "))} to ${role} with grant option;`);
    }
    if (role === "public" || role === "current_user") {
      sql.push(...lines);
    } else {
      // Like schemas/0900_privileges.sql: a role that does not exist here is not granted to.
      sql.push(
        `do $$\nbegin\n  if exists (select 1 from pg_roles where rolname = ${
          literal(unquote(grantee))
        }) then\n${lines.map((l) => `    ${l}`).join("\n")}\n  end if;\nend\n$$;`,
      );
    }
  }
  return sql;
}

/** The catalog key of the object a grant or comment is on (`table pgflow.t` for `view pgflow.t`). */
function objectKey(what: string, object: string): string {
  const tableLike = ["sequence", "view", "materialized view", "foreign table", "table"];
  return `${tableLike.includes(what) ? "table" : what} ${object}`;
}

async function securityAndComments(ctx: Ctx, all: Drift[]) {
  const [{ me }] = await ctx.released<{ me: string }[]>`select current_user as me`;
  const owner = quoteIdent(me);
  for (const d of all) {
    if (d.kind === "grant" || d.kind === "comment") {
      // Not on an object left to a person: a grant by argument types could reach its old version.
      const what = /^(materialized view|foreign table|\S+) (.*)$/.exec(d.name)!;
      if (ctx.byHand.has(objectKey(what[1], what[2]))) continue;
    }
    if (d.kind === "grant") {
      const space = d.name.indexOf(" ");
      const what = d.name.slice(0, space);
      const object = d.name.slice(space + 1);
      let sql: string[];
      if (what === "column") {
        const parts = idents(object);
        const table = parts.slice(0, 2).join(".");
        sql = aclStatements(
          d.released,
          d.declared,
          (p) => p.split(", ").map((x) => `${x} (${parts[2]})`).join(", ") + ` on table ${table}`,
          `(${parts[2]}) on table ${table}`,
          owner,
        );
      } else {
        sql = aclStatements(
          d.released,
          d.declared,
          (p) => `${p} on ${what} ${object}`,
          `on ${what} ${object}`,
          owner,
        );
      }
      // The object itself is only in the migrations (left to a person); a column's privileges
      // are listed only when it has some, so there no entry means "revoke them".
      if (d.declared === undefined && what !== "column") continue;
      if (sql.length) {
        await tryEmit(
          ctx,
          d.key,
          `privileges on ${d.name}`,
          `-- ---- privileges on ${d.name}`,
          sql.join("\n"),
        );
      }
    } else if (d.kind === "default privileges") {
      const m = /^(in all schemas|in schema \S+) for role (\S+) on (\w+)$/.exec(d.name);
      if (!m) continue;
      const scope = m[1] === "in all schemas" ? "" : ` ${m[1]}`;
      const forRole = m[2] === owner ? "" : ` for role ${m[2]}`;
      const prefix = `alter default privileges${forRole}${scope}`;
      const sql = aclStatements(
        d.released,
        d.declared,
        (p) => `${p} on ${m[3]}`,
        `on ${m[3]}`,
        "",
      ).map((s) => s.replace(/(^|\n\s*)(revoke|grant) /g, `$1${prefix} $2 `));
      if (sql.length) {
        await tryEmit(
          ctx,
          d.key,
          `default privileges ${d.name}`,
          `-- ---- default privileges ${d.name}`,
          sql.join("\n"),
        );
      }
    } else if (d.kind === "comment") {
      const space = d.name.startsWith("materialized view ")
        ? "materialized view".length
        : d.name.startsWith("foreign table ")
        ? "foreign table".length
        : d.name.indexOf(" ");
      const what = d.name.slice(0, space);
      const object = d.name.slice(space + 1);
      let target = `${what} ${object}`;
      if (["constraint", "trigger", "policy"].includes(what)) {
        const parts = idents(object);
        target = `${what} ${parts[2]} on ${parts.slice(0, 2).join(".")}`;
      }
      const value = d.declared === undefined ? "null" : literal(d.declared);
      await tryEmit(
        ctx,
        d.key,
        `comment on ${d.name}`,
        `-- ---- comment on ${d.name}`,
        `comment on ${target} is ${value};`,
      );
    }
  }
}

async function readSchemaStatements(dir: string): Promise<SchemaStatement[]> {
  const files: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if (e.isFile && e.name.endsWith(".sql")) files.push(e.name);
  }
  files.sort();
  const out: SchemaStatement[] = [];
  for (const [i, file] of files.entries()) {
    const text = await Deno.readTextFile(`${dir.replace(/\/$/, "")}/${file}`);
    splitStatements(text).forEach((s, j) => out.push({ file, order: i * 10_000 + j, ...s }));
  }
  return out;
}

async function withPgmqTemplate<T>(
  options: GenerateOptions,
  fn: (template: string) => Promise<T>,
): Promise<T> {
  if (options.pgmqTemplate) return await fn(options.pgmqTemplate);
  // One scratch database with PGMQ installed, cloned by the others, dropped at the end.
  let result: T | undefined;
  await withScratchDatabase(options.serverUrl, async (sql, url) => {
    const name = new URL(url).pathname.slice(1);
    await sql.end();
    result = await fn(name);
  });
  return result as T;
}

/**
 * Compares the migrations with the schema files and writes the statements that bring a database
 * with the migrations to the schema files' catalog. Nothing outside scratch databases is touched.
 *
 * @example
 * ```ts
 * const { body, byHand } = await generateMigration({
 *   serverUrl: "postgres://postgres@127.0.0.1:5432/postgres",
 *   schemasDir: "supabase/schemas/",
 *   migrationsDir: "supabase/migrations/",
 * });
 * ```
 */
export function generateMigration(options: GenerateOptions): Promise<GeneratedMigration> {
  const schema = options.schema ?? "pgflow";
  return withPgmqTemplate(options, async (template) => {
    const scratch = <T>(fn: (sql: Sql) => Promise<T>) =>
      withScratchDatabase(options.serverUrl, fn, { template });
    return await scratch((declared) =>
      scratch(async (released) => {
        await applySchemaFiles(declared, options.schemasDir);
        await applyMigrations(released, options.migrationsDir);
        const ctx: Ctx = {
          schema,
          released,
          declared,
          declaredCatalog: await catalogSnapshot(declared, schema),
          statements: await readSchemaStatements(options.schemasDir),
          sections: [],
          changes: [],
          byHand: new Map(),
        };
        // One transaction, so that a candidate statement can be tried and taken back.
        await released.unsafe("begin").simple();
        const passes = [
          removals,
          columns,
          definitions,
          constraints,
          indexesViewsTriggers,
          rowSecurity,
          securityAndComments,
        ];
        const passSections: Section[][] = [];
        for (const pass of passes) {
          ctx.sections = [];
          await pass(ctx, (await drift(ctx)).filter((d) => !ctx.byHand.has(d.key)));
          passSections.push(ctx.sections.sort((a, b) => a.order - b.order));
        }
        // What follows from an object left to a person (its grants, comments, a table's parts)
        // is not listed again.
        const leftTables = [...ctx.byHand.keys()].filter((k) => k.startsWith("table "))
          .map((k) => k.slice("table ".length));
        const followsFromLeft = (key: string) => {
          const { kind, name } = parseKey(key);
          if (kind === "grant" || kind === "comment") {
            const what = /^(materialized view|foreign table|\S+) (.*)$/.exec(name)!;
            if (ctx.byHand.has(objectKey(what[1], what[2]))) return true;
          }
          return leftTables.some((t) =>
            name === t || name.startsWith(`${t}.`) || name.endsWith(` ${t}`) ||
            name.includes(` ${t}.`)
          );
        };
        for (const d of await drift(ctx)) {
          if (!ctx.byHand.has(d.key) && !followsFromLeft(d.key)) {
            ctx.byHand.set(
              d.key,
              diffCatalogs(
                new Map(d.declared === undefined ? [] : [[d.key, d.declared]]),
                new Map(d.released === undefined ? [] : [[d.key, d.released]]),
                "schemas",
                "migrations",
              )[0].split("\n")[0] + " (not generated: write it by hand)",
            );
          }
        }
        await released.unsafe("rollback").simple();
        const body = passSections.flat().map((s) => `${s.header}\n${s.sql}\n`).join("\n");
        const byHand = [...ctx.byHand.values()].sort();
        if (body) {
          // The migration as written, on top of the migrations, in a fresh database.
          const left = await scratch(async (fresh) => {
            const dir = await Deno.makeTempDir({ prefix: "pgflow-migration-check-" });
            try {
              for await (const e of Deno.readDir(options.migrationsDir)) {
                if (e.isFile && e.name.endsWith(".sql")) {
                  await Deno.copyFile(
                    `${options.migrationsDir.replace(/\/$/, "")}/${e.name}`,
                    `${dir}/${e.name}`,
                  );
                }
              }
              await Deno.writeTextFile(
                `${dir}/99999999999999_generated.sql`,
                withHeader("check", body, [], []),
              );
              await applyMigrations(fresh, dir);
            } catch (err) {
              return [`the generated migration: does not apply (${message(err)})`];
            } finally {
              await Deno.remove(dir, { recursive: true });
            }
            return diffCatalogs(
              ctx.declaredCatalog,
              await catalogSnapshot(fresh, schema),
              "schemas",
              "migrations",
            );
          });
          for (const line of left) {
            const key = line.slice(0, line.indexOf(": "));
            const known = ctx.byHand.has(key) || (key.includes(" ") && followsFromLeft(key));
            if (!known) {
              byHand.push(
                `${line.split("\n")[0]} (after the generated migration; write it by hand)`,
              );
            }
          }
        }
        return { body, changes: ctx.changes, byHand };
      })
    );
  });
}

/**
 * The whole file: a header saying what changed and what is left to write, then the statements.
 *
 * @example
 * ```ts
 * const text = withHeader("pgflow_error_codes", body, changes, byHand, "20270101000000_pgflow_error_codes");
 * ```
 */
export function withHeader(
  name: string,
  body: string,
  changes: string[],
  byHand: string[],
  migration?: string,
): string {
  const lines = [
    `-- ${name}: written by \`deno task migration:new\` from the schema files that differ from the`,
    "-- migrations before it. Say here what it changes and why, what it does to existing data, and",
    "-- how long it locks what (docs/upgrade.md).",
  ];
  if (changes.length) lines.push("--", "-- Changes:", ...changes.map((c) => `-- - ${c}`));
  if (byHand.length) {
    lines.push(
      "--",
      "-- TO WRITE BY HAND (tests/sql/schema_first_test.ts fails until this file has them):",
      ...byHand.map((c) => `-- - ${c}`),
    );
  }
  // One transaction, like every migration: psql -f applies it whole or not at all. Given the
  // file's name, it also refuses to run where it is recorded and records itself (docs/upgrade.md).
  const guard = migration === undefined ? "" : `
-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '${migration}') then
    raise exception 'pgflow migration ${migration} is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;
`;
  const record = migration === undefined
    ? ""
    : `\ninsert into pgflow.migrations (name) values ('${migration}') on conflict (name) do nothing;\n`;
  return `${
    lines.join("\n")
  }\nbegin;\n${guard}\nset local lock_timeout = '5s';\n\n${body}${record}\ncommit;\n`;
}
