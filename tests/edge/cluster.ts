/**
 * A throw-away Postgres of the Edge tests' own (never the shared test server): PGMQ, the engine's
 * migrations, the test-only `pg_net` and `supabase_vault` stand-ins (extensions/), and, when asked,
 * Debian's real pg_cron loaded with `shared_preload_libraries`.
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { notInstalled, PG_CRON, postgresShareDir } from "../../local/provision.ts";

/** The stand-in extensions' files, copied into the server's share folder. */
const EXTENSION_FILES = [
  "pg_net.control",
  "pg_net--0.0.1.sql",
  "supabase_vault.control",
  "supabase_vault--0.0.1.sql",
];

/**
 * Copies the test-only extensions into the server's `extension/` folder (needs write access
 * there: root, as the test command runs in CI). A file already there with the same text is left.
 */
export async function placeTestExtensions(): Promise<void> {
  const share = postgresShareDir();
  if (share === undefined) {
    throw new Error(
      "the Edge tests need Debian's PostgreSQL server (pg_config --sharedir): install it with " +
        "`apt-get install -y --no-install-recommends postgresql-15` as root",
    );
  }
  for (const name of EXTENSION_FILES) {
    const text = await Deno.readTextFile(new URL(`extensions/${name}`, import.meta.url));
    const target = `${share}/extension/${name}`;
    const current = await Deno.readTextFile(target).catch(() => undefined);
    if (current === text) continue;
    try {
      await Deno.writeTextFile(target, text);
    } catch (error) {
      throw new Error(
        `cannot place the test-only extension ${name} in ${share}/extension (${
          (error as Error).message
        }): run the tests as root (\`deno task test\` in CI does)`,
      );
    }
  }
}

/** A running cluster of the Edge tests. */
export interface EdgeCluster {
  /** Superuser URL of the `postgres` database (where pg_cron runs its jobs). */
  readonly url: string;
  /** A small pool on it. */
  readonly sql: postgres.Sql;
  /** Closes the pool, stops the server, deletes its data. */
  destroy(): Promise<void>;
}

/**
 * Starts a cluster with the engine, pg_net and Vault stand-ins and (with `cron`) pg_cron.
 *
 * @example
 * ```ts
 * const cluster = await startEdgeCluster({ cron: true });
 * try { await cluster.sql`select 1`; } finally { await cluster.destroy(); }
 * ```
 */
export async function startEdgeCluster(options: { cron?: boolean } = {}): Promise<EdgeCluster> {
  await placeTestExtensions();
  if (options.cron && PG_CRON.find() === undefined) throw new Error(notInstalled(PG_CRON, "-"));
  const pg = await startLocalPostgres();
  let sql = postgres(pg.url, { max: 4, onnotice: () => {} });
  try {
    if (options.cron) {
      // pg_cron is loaded at server start and runs its jobs in one database, as on Supabase.
      // Background workers: jobs need no connection through the network or a password.
      // (cron.* is unknown to the server before the library is loaded: no ALTER SYSTEM for it.)
      await sql.end();
      await Deno.writeTextFile(
        `${pg.dataDir}/data/postgresql.conf`,
        [
          "",
          "shared_preload_libraries = 'pg_cron'",
          "cron.database_name = 'postgres'",
          "cron.use_background_workers = on",
          "max_worker_processes = 32",
          "",
        ].join("\n"),
        { append: true },
      );
      await pg.stop();
      await pg.start();
      sql = postgres(pg.url, { max: 4, onnotice: () => {} });
      await sql.unsafe(`create extension pg_cron`);
    }
    await installPgmq(sql);
    await applyMigrations(sql);
    await sql.unsafe(`create extension pg_net with schema extensions`).catch(async () => {
      await sql.unsafe(`create schema if not exists extensions`);
      await sql.unsafe(`create extension pg_net with schema extensions`);
    });
    await sql.unsafe(`create extension supabase_vault`);
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    await pg.destroy();
    throw error;
  }
  const pool = sql;
  return {
    url: pg.url,
    sql: pool,
    destroy: async () => {
      await pool.end({ timeout: 1 }).catch(() => {});
      await pg.destroy();
    },
  };
}
