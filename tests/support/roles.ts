/**
 * Supabase's client roles in a test database: `anon` and `authenticated` made where they are
 * missing (as on plain Postgres; `service_role` comes with the migrations), and a query run as one
 * of them.
 *
 * @module
 */
import type postgres from "postgres";

/** The roles a Supabase API request runs as, besides `service_role`. */
export const CLIENT_ROLES = ["anon", "authenticated"] as const;

/**
 * Creates `anon` and `authenticated` (without login) where they do not exist.
 *
 * @example
 * ```ts
 * await ensureClientRoles(sql);
 * ```
 */
export async function ensureClientRoles(sql: postgres.Sql): Promise<void> {
  for (const role of CLIENT_ROLES) {
    await sql.unsafe(
      `do $$ begin create role ${role} nologin; exception when duplicate_object then null; end $$`,
    );
  }
}

/**
 * Runs `query` as `role`, in a transaction of its own.
 *
 * @example
 * ```ts
 * const rows = await asRole(sql, "service_role", "select * from pgflow.list_aliases()");
 * ```
 */
export function asRole(
  sql: postgres.Sql,
  role: string,
  query: string,
): Promise<postgres.Row[]> {
  return sql.begin(async (tx) => {
    await tx.unsafe(`set local role ${role}`);
    return await tx.unsafe(query);
  }) as Promise<postgres.Row[]>;
}
