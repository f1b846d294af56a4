/**
 * Provides PGMQ's public API on a database: the real extension where the server has it, else the
 * project's PGMQ-compatible SQL (`local/pgmq.sql`, shipped with the module). A database that already
 * has a `pgmq` schema is left exactly as it is.
 *
 * @module
 */
import type { Sql } from "../../platform/types.ts";
import { readPackagedText } from "../packaged.ts";

/**
 * How PGMQ came to be available.
 *
 * @example
 * ```ts
 * import type { PgmqSource } from "./pgmq.ts";
 *
 * const source: PgmqSource = "compatible";
 * ```
 */
export type PgmqSource = "existing" | "extension" | "compatible";

/** The PGMQ-compatible SQL, from the module's root. */
export const COMPATIBLE_PGMQ_SQL = "local/pgmq.sql";

/**
 * What the database offers: a `pgmq` schema already, and whether the server has the extension.
 *
 * @example
 * ```ts
 * import { pgmqAvailability } from "./pgmq.ts";
 *
 * // const { present, extension } = await pgmqAvailability(sql);
 * ```
 */
export async function pgmqAvailability(
  sql: Sql,
): Promise<{ present: boolean; extension: boolean }> {
  const [row] = await sql<{ present: boolean; extension: boolean }[]>`
    select exists (select 1 from pg_catalog.pg_namespace where nspname = 'pgmq') as present,
           exists (select 1 from pg_catalog.pg_available_extensions where name = 'pgmq')
             as extension`;
  return row;
}

/**
 * Installs the PGMQ-compatible SQL (one simple-protocol script; safe inside a transaction).
 *
 * @example
 * ```ts
 * import { installCompatiblePgmq } from "./pgmq.ts";
 *
 * // await installCompatiblePgmq(sql);
 * ```
 */
export async function installCompatiblePgmq(sql: Sql): Promise<void> {
  await sql.unsafe(await readPackagedText(COMPATIBLE_PGMQ_SQL)).simple();
}

/**
 * Makes `pgmq.*` available on the connected database and says where it came from. Set
 * `PGFLOW_PGMQ=compatible` to prefer the compatible SQL over an available extension.
 *
 * @example
 * ```ts
 * import { installPgmq } from "./pgmq.ts";
 *
 * // const source = await installPgmq(sql); // "extension" on Supabase, "compatible" elsewhere
 * ```
 */
export async function installPgmq(sql: Sql): Promise<PgmqSource> {
  const { present, extension } = await pgmqAvailability(sql);
  if (present) return "existing";
  if (extension && Deno.env.get("PGFLOW_PGMQ") !== "compatible") {
    await sql`create extension pgmq`;
    return "extension";
  }
  await installCompatiblePgmq(sql);
  return "compatible";
}
