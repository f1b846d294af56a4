/**
 * Throw-away databases on a server, for comparing catalogs: one cloned from a template (or from
 * `template0` with PGMQ installed), used, then dropped. Names start with `t_scratch_`, so a test run
 * drops any left behind (`tests/support/templates.ts`).
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq } from "../src/cli/db/pgmq.ts";

/** Replaces the database name in a connection URL. */
function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

const quiet = { onnotice: () => {} };

/** Options of {@link withScratchDatabase}. */
export interface ScratchOptions {
  /**
   * Database to clone (it must have no other connection). Default: `template0`, then PGMQ is
   * installed (the extension where the server has it, else `local/pgmq.sql`).
   */
  template?: string;
}

/**
 * Creates a scratch database on the server behind `serverUrl`, runs `fn` on a one-connection pool
 * to it, and drops it (also when `fn` throws).
 *
 * @example
 * ```ts
 * const n = await withScratchDatabase(url, async (sql) => (await sql`select 1 as n`)[0].n);
 * ```
 */
export async function withScratchDatabase<T>(
  serverUrl: string,
  fn: (sql: postgres.Sql, url: string) => Promise<T>,
  options: ScratchOptions = {},
): Promise<T> {
  const name = `t_scratch_${crypto.randomUUID().replaceAll("-", "").slice(0, 12)}`;
  const admin = postgres(serverUrl, { max: 1, ...quiet });
  try {
    await admin.unsafe(`create database ${name} template ${options.template ?? "template0"}`);
    const url = withDatabase(serverUrl, name);
    const sql = postgres(url, { max: 1, ...quiet });
    try {
      if (!options.template) await installPgmq(sql);
      return await fn(sql, url);
    } finally {
      await sql.end({ timeout: 5 });
    }
  } finally {
    await admin.unsafe(`drop database if exists ${name} with (force)`).catch(() => {});
    await admin.end({ timeout: 5 });
  }
}
