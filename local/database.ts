/**
 * A ready pgflow database for the demo and the benchmarks: `DATABASE_URL` when set, else a
 * throw-away local Postgres started here. Either way PGMQ is provided and every migration applied.
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq, type PgmqSource } from "../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { applyMigrations } from "./db_push.ts";

/** An open database; `close` stops the server if this process started it. */
export interface PgflowDatabase {
  url: string;
  /** True when the server was started here (and is thrown away on close). */
  local: boolean;
  pgmq: PgmqSource;
  close(): Promise<void>;
}

/**
 * Opens the database and brings it up to date.
 *
 * @example
 * ```ts
 * const db = await openPgflowDatabase();
 * try { console.log(db.url); } finally { await db.close(); }
 * ```
 */
export async function openPgflowDatabase(
  options: { verbose?: boolean; durable?: boolean } = {},
): Promise<PgflowDatabase> {
  const external = Deno.env.get("DATABASE_URL");
  const server = external
    ? undefined
    : await startLocalPostgres({ verbose: options.verbose, durable: options.durable });
  const url = external ?? server!.url;
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    const pgmq = await installPgmq(sql);
    await applyMigrations(sql);
    // A server started here holds nothing but this process's data: changed definitions may be
    // recompiled in place. A DATABASE_URL is never marked so.
    if (server) await sql`select pgflow.set_local_development(true)`;
    return {
      url,
      local: !!server,
      pgmq,
      close: () => server ? server.destroy() : Promise.resolve(),
    };
  } catch (err) {
    await server?.destroy();
    throw err;
  } finally {
    await sql.end();
  }
}
