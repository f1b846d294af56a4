/**
 * The dashboard's only way to the database: every read runs inside a `read only` transaction, so
 * no query it sends (nor a function it calls) can change anything, whatever the SQL says.
 *
 * @module
 */
import type { Sql } from "../../platform/types.ts";

/** A transaction handle as `sql.begin` gives it: tagged-template queries, nothing else needed. */
export type ReadTx = Sql;

/**
 * Runs `read` inside `begin read only … commit`; a write inside fails with SQLSTATE 25006.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 *
 * // const n = await readOnly(sql, async (tx) => (await tx`select count(*)::int as n from pgflow.runs`)[0].n);
 * ```
 */
export async function readOnly<T>(sql: Sql, read: (tx: ReadTx) => Promise<T>): Promise<T> {
  // postgres.js types the callback's handle as TransactionSql; the tagged-template part is Sql's.
  return await sql.begin("read only", (tx) => read(tx as unknown as ReadTx)) as T;
}
