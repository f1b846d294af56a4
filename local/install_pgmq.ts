/**
 * Provides PGMQ's public API on a database: the real extension where the server has it, else the
 * project's PGMQ-compatible SQL (`local/pgmq.sql`). A database that already has a `pgmq` schema is
 * left exactly as it is.
 *
 * @module
 */
import type { Sql } from "postgres";

/** How PGMQ came to be available. */
export type PgmqSource = "existing" | "extension" | "compatible";

const COMPATIBLE_SQL = new URL("./pgmq.sql", import.meta.url);

/**
 * Makes `pgmq.*` available on the connected database and says where it came from.
 *
 * @example
 * ```ts
 * const source = await installPgmq(sql); // "extension" on Supabase, "compatible" elsewhere
 * ```
 */
export async function installPgmq(sql: Sql): Promise<PgmqSource> {
  const [{ present }] = await sql<{ present: boolean }[]>`
    select exists (select 1 from pg_namespace where nspname = 'pgmq') as present`;
  if (present) return "existing";
  const [{ available }] = await sql<{ available: boolean }[]>`
    select exists (select 1 from pg_available_extensions where name = 'pgmq') as available`;
  if (available && Deno.env.get("PGFLOW_PGMQ") !== "compatible") {
    await sql`create extension pgmq`;
    return "extension";
  }
  await sql.unsafe(await Deno.readTextFile(COMPATIBLE_SQL)).simple();
  return "compatible";
}
