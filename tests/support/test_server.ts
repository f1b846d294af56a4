/**
 * The database server a test run uses: `DATABASE_URL` when set (it may be Supabase with the real
 * PGMQ extension), else a throw-away local Postgres started for the run.
 *
 * @module
 */
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";

/** A server for one run; `close` stops it if this run started it. */
export interface TestServer {
  url: string;
  local: boolean;
  close(): Promise<void>;
}

/**
 * Opens the run's server.
 *
 * @example
 * ```ts
 * const server = await openTestServer();
 * try { console.log(server.url); } finally { await server.close(); }
 * ```
 */
export async function openTestServer(): Promise<TestServer> {
  const external = Deno.env.get("DATABASE_URL");
  if (external) return { url: external, local: false, close: () => Promise.resolve() };
  const pg = await startLocalPostgres({ verbose: true });
  return { url: pg.url, local: true, close: () => pg.destroy() };
}
