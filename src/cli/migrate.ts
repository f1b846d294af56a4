/**
 * `pgflow migrate [--database-url URL] [--pgmq-sql]`: applies the engine's missing migrations to a
 * database directly (any Postgres, local work), each in its own transaction and recorded in
 * `pgflow.migrations`.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import { readSchemaVersion, schemaVersionProblem } from "../operations/schema_version.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { parseArgs } from "./args.ts";
import { databaseUrl, openDatabase, redact } from "./connect.ts";
import { installCompatiblePgmq, pgmqAvailability } from "./db/pgmq.ts";
import { engineMigrations } from "./shipped_migrations.ts";
import {
  applyMigrations,
  describeError,
  type MigrationPlan,
  planMigrations,
} from "./migration_runner.ts";
import { CliError, elapsed, progress } from "./output.ts";

/** The help text of `pgflow migrate`. */
export const MIGRATE_HELP = `pgflow migrate [--database-url URL] [--pgmq-sql]

Applies the engine's migrations that a database lacks, in order, each in its own transaction, and
records each in pgflow.migrations. A database whose migrations the Supabase CLI manages is refused
(see --ignore-supabase-history): there, use \`pgflow install\` + \`supabase db push\`, so the two
tools never disagree about what is applied. A half-applied or unknown state is refused
before anything changes; a failing migration is rolled back and named. Works through a
transaction pooler (Supavisor port 6543, PgBouncer).

  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --pgmq-sql          when the server has no pgmq extension, install the PGMQ-compatible SQL that
                      ships with @pgflow/shared (for development and tests)
  --ignore-supabase-history
                      apply them even though the Supabase CLI manages this database's migrations
                      (it has supabase_migrations.schema_migrations). Without it migrate refuses
                      there: a later \`supabase db push\` of the same migrations (\`pgflow install\`)
                      would stop at the first one, already applied. Use \`pgflow install\` +
                      \`supabase db push\` on such a database instead.

Exit codes: 0 migrated or up to date, 1 refused or failed (nothing changed by the failing file),
2 usage error.`;

/**
 * Runs `pgflow migrate`; returns the exit code.
 *
 * @example
 * ```ts
 * import { migrate } from "./migrate.ts";
 *
 * // Deno.exit(await migrate(["--database-url", "postgres://postgres@127.0.0.1:54330/postgres"]));
 * ```
 */
export async function migrate(argv: readonly string[]): Promise<number> {
  const args = parseArgs(
    argv,
    { "database-url": "string", "pgmq-sql": "boolean", "ignore-supabase-history": "boolean" },
    "pgflow migrate",
  );
  if (args.help) {
    console.log(MIGRATE_HELP);
    return 0;
  }
  const { url } = databaseUrl(args.strings["database-url"], "pgflow migrate");
  const sql = await openDatabase(url);
  try {
    await migrateDatabase(sql, {
      pgmqSql: args.booleans.has("pgmq-sql"),
      label: redact(url),
      supabaseHistory: args.booleans.has("ignore-supabase-history") ? "ignore" : "refuse",
    });
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/** Options of {@link migrateDatabase}. */
export interface MigrateOptions {
  /** Install the PGMQ-compatible SQL when neither a pgmq schema nor the extension is there. */
  readonly pgmqSql?: boolean;
  /** How to name the database in progress lines. */
  readonly label?: string;
  /**
   * What to do where the Supabase CLI keeps the database's migration history: `refuse` (the
   * command's default) or `ignore`; default `ignore` for callers that made the database
   * themselves (`db start`).
   */
  readonly supabaseHistory?: "refuse" | "ignore";
}

/**
 * Brings a connected database up to this release's engine schema, with progress lines on stderr;
 * returns the names of the migrations applied. Refusals and failures are {@link CliError}s.
 *
 * @example
 * ```ts
 * import { migrateDatabase } from "./migrate.ts";
 *
 * // const applied = await migrateDatabase(sql, { pgmqSql: true });
 * ```
 */
export async function migrateDatabase(sql: Sql, options: MigrateOptions = {}): Promise<string[]> {
  const engine = await engineMigrations();
  let plan: MigrationPlan;
  try {
    plan = await planMigrations(sql, engine);
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      `could not read which engine migrations the database has: ${describeError(error)}. ` +
        "Connect as the role that owns the pgflow schema (postgres on Supabase)",
    );
  }
  const where = options.label ? ` on ${options.label}` : "";
  if (plan.pending.length === 0) {
    await confirmVersion(sql);
    progress(`up to date${where}: engine ${ENGINE_VERSION}, ${plan.applied.length} migrations`);
    return [];
  }
  if (options.supabaseHistory === "refuse" && await hasSupabaseHistory(sql)) {
    throw new CliError(
      `the Supabase CLI manages this database's migrations (it has ` +
        `supabase_migrations.schema_migrations), and applying the engine's ${plan.pending.length} ` +
        `migration(s) here directly would make a later \`supabase db push\` of them stop at the ` +
        `first one ("already applied"); nothing was changed. Add them to your project and push ` +
        `them instead: \`pgflow install\` then \`supabase db push\` (\`supabase migration up\` for ` +
        `the local stack). For a database you never push to, pass --ignore-supabase-history`,
    );
  }
  let beforeFirst: ((tx: Sql) => Promise<void>) | undefined;
  if (plan.applied.length === 0) {
    const pgmq = await pgmqAvailability(sql);
    if (!pgmq.present && !pgmq.extension) {
      if (!options.pgmqSql) {
        throw new CliError(
          "PGMQ is not installed in this database and the server has no pgmq extension, which " +
            "the engine needs for its queues; nothing was changed. Install the extension on the " +
            "server (https://github.com/pgmq/pgmq; Supabase has it), or run migrate with " +
            "--pgmq-sql to install the PGMQ-compatible SQL that ships with @pgflow/shared",
        );
      }
      beforeFirst = async (tx) => {
        progress("installing the PGMQ-compatible SQL (no pgmq extension on this server)");
        await installCompatiblePgmq(tx);
      };
    }
  }
  const drafts = plan.pending.filter((m) => m.sha256 === undefined).length;
  progress(
    `applying ${plan.pending.length} migration(s)${where}` +
      (plan.applied.length ? ` (${plan.applied.length} already applied)` : "") +
      (drafts ? `; ${drafts} of them unreleased drafts of this checkout` : ""),
  );
  const started = performance.now();
  const applied = await applyMigrations(sql, plan, {
    beforeFirst,
    onFile: ({ migration, index, total, ms }) => {
      if (ms === undefined) progress(`  ${index + 1}/${total} ${migration.file}`);
      else if (ms > 1000) progress(`  ${index + 1}/${total} done in ${(ms / 1000).toFixed(1)} s`);
    },
  });
  await confirmVersion(sql);
  progress(`migrated${where} to engine ${ENGINE_VERSION} in ${elapsed(started)}`);
  return applied;
}

async function confirmVersion(sql: Sql): Promise<void> {
  const problem = schemaVersionProblem(await readSchemaVersion(sql), ENGINE_VERSION);
  if (problem !== undefined) {
    throw new CliError(`the migrations are applied, but the engine version is wrong: ${problem}`);
  }
}

/** Whether the Supabase CLI keeps a migration history in this database. */
async function hasSupabaseHistory(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ found: boolean }[]>`
    select to_regclass('supabase_migrations.schema_migrations') is not null as found`;
  return row.found;
}
