/**
 * Applies the engine's migrations to a database, each file in its own transaction, recording each in
 * `pgflow.migrations` in that same transaction. Before anything is applied, the database's state is
 * read and a half-applied or unknown state is refused with what to do; a refused or failed run
 * changes nothing (a failed file is rolled back; the files before it stay applied and recorded).
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import { cliCommand } from "../operations/schema_version.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { type EngineMigration, migrationBody, migrationText } from "./shipped_migrations.ts";
import { CliError } from "./output.ts";

/**
 * The record table, exactly as the baseline migration (and `supabase/schemas/0015_engine_version.sql`)
 * creates it. The runner creates it first, so it can read the record before the baseline is applied
 * (a test keeps the texts equal).
 */
export const RECORD_TABLE_DDL = `create table if not exists pgflow.migrations (
  name text not null,
  applied_at timestamptz not null default now(),
  constraint migrations_pkey primary key (name),
  constraint migrations_name_is_a_migration check (name ~ '^[0-9]{14}_[a-z0-9_]+$')
);`;

/** Serialises concurrent runners: each file's transaction takes this advisory lock first. */
const LOCK = "select pg_advisory_xact_lock(hashtext('pgflow migrate'))";

/**
 * What {@link planMigrations} found: the engine migrations already applied and those still to
 * apply.
 *
 * @example
 * ```ts
 * import type { MigrationPlan } from "./migration_runner.ts";
 *
 * const done = (plan: MigrationPlan) => plan.pending.length === 0;
 * ```
 */
export interface MigrationPlan {
  /** Names of the applied engine migrations, in order. */
  readonly applied: readonly string[];
  /** The migrations to apply, in order. */
  readonly pending: readonly EngineMigration[];
}

/** How to start again from nothing on a database that holds nothing of value. */
const START_OVER = "if this database holds no pgflow data you need, drop the schema " +
  "(`drop schema pgflow cascade;`) and run migrate again; otherwise restore the backup taken " +
  "before it was changed";

/**
 * Reads which engine migrations a database has, and refuses what cannot be continued safely: a
 * gap in the record, migrations this release does not ship (a newer release migrated it), or a
 * `pgflow` schema nothing records the origin of.
 *
 * @example
 * ```ts
 * import { engineMigrations } from "./shipped_migrations.ts";
 * import { planMigrations } from "./migration_runner.ts";
 * import { createPool } from "../platform/pool.ts";
 *
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres", { max: 1 });
 * // const plan = await planMigrations(sql, await engineMigrations());
 * ```
 */
export async function planMigrations(
  sql: Sql,
  known: readonly EngineMigration[],
): Promise<MigrationPlan> {
  const [state] = await sql<{ schema: boolean; record: boolean }[]>`
    select exists (select 1 from pg_catalog.pg_namespace where nspname = 'pgflow') as schema,
           exists (select 1 from pg_catalog.pg_class c
                   join pg_catalog.pg_namespace n on n.oid = c.relnamespace
                   where n.nspname = 'pgflow' and c.relname = 'migrations') as record`;
  if (!state.schema) return { applied: [], pending: known };
  if (state.record) {
    const rows = await sql<{ name: string }[]>`select name from pgflow.migrations order by name`;
    return fromRecord(rows.map((r) => r.name), known);
  }
  // The baseline creates the record table in its own transaction: a pgflow schema without it was
  // not built by the engine's migrations.
  throw new CliError(
    "this database has a pgflow schema, but nothing records which engine migrations built it " +
      "(no pgflow.migrations table): it was built by hand or by an unversioned install, and may " +
      `be half-applied, so migrate will not guess. Nothing was changed. ${START_OVER}`,
  );
}

function fromRecord(recorded: readonly string[], known: readonly EngineMigration[]): MigrationPlan {
  const names = new Set(known.map((m) => m.name));
  const unknown = recorded.filter((n) => !names.has(n));
  if (unknown.length > 0) {
    throw new CliError(
      `this database has engine migrations that @pgflow/shared ${ENGINE_VERSION} does not ship ` +
        `(${unknown.join(", ")}): a newer release migrated it. Nothing was changed. Run that ` +
        `release's migrate instead (\`${
          cliCommand("migrate", "<version>")
        }\`; its version is in \`select pgflow.engine_version()\`)`,
    );
  }
  const done = new Set(recorded);
  const firstMissing = known.findIndex((m) => !done.has(m.name));
  const applied = firstMissing < 0 ? known : known.slice(0, firstMissing);
  const later = known.slice(applied.length).filter((m) => done.has(m.name));
  if (later.length > 0) {
    throw new CliError(
      `this database's migration record has a gap: ${known[firstMissing].name} is not recorded, ` +
        `but the later ${later.map((m) => m.name).join(", ")} ${
          later.length > 1 ? "are" : "is"
        }. ` +
        "The files were applied out of order or a record row was deleted, so migrate will not " +
        "guess what is there. Nothing was changed. If the missing migration's changes are there, " +
        `record it (\`insert into pgflow.migrations (name) values ('${
          known[firstMissing].name
        }');\`) and run migrate again; otherwise ${START_OVER}`,
    );
  }
  return { applied: applied.map((m) => m.name), pending: known.slice(applied.length) };
}

/** Options of {@link applyMigrations}. */
export interface ApplyOptions {
  /** Called before each file with its position, and after with its duration in ms. */
  readonly onFile?: (event: {
    readonly migration: EngineMigration;
    readonly index: number;
    readonly total: number;
    readonly ms?: number;
  }) => void;
  /** Runs first in the first file's transaction (e.g. installing PGMQ). */
  readonly beforeFirst?: (tx: Sql) => Promise<void>;
}

/**
 * Applies the plan's pending migrations in order, each in its own transaction (under an advisory
 * lock, so concurrent runners apply each file once) together with its record row. Returns the
 * names applied. A failing file is rolled back and reported naming the file.
 *
 * @example
 * ```ts
 * import { engineMigrations } from "./shipped_migrations.ts";
 * import { applyMigrations, planMigrations } from "./migration_runner.ts";
 * import { createPool } from "../platform/pool.ts";
 *
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres", { max: 1 });
 * // const applied = await applyMigrations(sql, await planMigrations(sql, await engineMigrations()));
 * ```
 */
export async function applyMigrations(
  sql: Sql,
  plan: MigrationPlan,
  options: ApplyOptions = {},
): Promise<string[]> {
  const done: string[] = [];
  let first = true;
  // Every file is read and checked before the first is applied.
  const bodies = await Promise.all(
    plan.pending.map(async (m) => migrationBody(await migrationText(m), m.file)),
  );
  for (const [index, migration] of plan.pending.entries()) {
    const body = bodies[index];
    const total = plan.pending.length;
    options.onFile?.({ migration, index, total });
    const started = performance.now();
    let applied = false;
    try {
      await sql.begin(async (tx) => {
        await tx.unsafe(LOCK);
        await tx.unsafe(`do $$ begin
          if to_regclass('pgflow.migrations') is null then
            create schema if not exists pgflow;
            ${RECORD_TABLE_DDL}
          end if; end $$`);
        const [{ present }] = await tx<{ present: boolean }[]>`
          select exists (select 1 from pgflow.migrations where name = ${migration.name}) as present`;
        if (present) return; // another runner applied it meanwhile
        if (first) await options.beforeFirst?.(tx as unknown as Sql);
        await tx.unsafe(body).simple();
        await tx`insert into pgflow.migrations (name) values (${migration.name})
                 on conflict do nothing`;
        applied = true;
      });
    } catch (error) {
      throw new CliError(
        `migration ${migration.file} failed and was rolled back, so it changed nothing: ` +
          `${describeError(error)}.` +
          ((error as { code?: string }).code === "42501"
            ? " The connected role may not make these changes: run migrate as the database's " +
              "owner (postgres on Supabase), or grant that role CREATE on the database."
            : "") +
          (done.length ? ` Applied before it: ${done.join(", ")}.` : "") +
          " Fix the cause and run migrate again; it continues from this file",
      );
    }
    first = false;
    if (applied) done.push(migration.name);
    options.onFile?.({ migration, index, total, ms: performance.now() - started });
  }
  return done;
}

/** A database error with its SQLSTATE, detail and hint, on one line. */
export function describeError(error: unknown): string {
  const e = error as { message?: string; code?: string; detail?: string; hint?: string };
  const parts = [e.message ?? String(error)];
  if (e.code && /^[0-9A-Z]{5}$/.test(e.code)) parts[0] += ` (SQLSTATE ${e.code})`;
  if (e.detail) parts.push(`detail: ${e.detail}`);
  if (e.hint) parts.push(`hint: ${e.hint}`);
  return parts.join("; ");
}
