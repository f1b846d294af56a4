/**
 * The third-party types that appear in the public API, under names of this module, so its
 * documentation is whole without documenting postgres.js and supabase-js too.
 *
 * @module
 */
// supabase-js takes `@opentelemetry/api` as an optional peer. Naming the API here (types only:
// nothing is loaded) keeps a fresh resolution (a new project, no lockfile yet) type-checking
// supabase-js with that peer; without it, its Realtime types went unresolved in such a project.
import type {} from "npm:@opentelemetry/api@1.9.0";
import type postgres from "npm:postgres@3.4.7";
import type { SupabaseClient as SupabaseJsClient } from "npm:@supabase/supabase-js@2.119.2";

/**
 * A postgres.js pool (`postgres.Sql`): what `createPool` returns, what `context.sql` is, and what
 * a worker's `sql` option takes.
 *
 * @example
 * ```ts
 * import { createPool, type Sql } from "@pgflow/shared";
 *
 * const sql: Sql = createPool("postgres://postgres@127.0.0.1:5432/postgres");
 * ```
 */
export type Sql = postgres.Sql;

/**
 * A supabase-js client (`SupabaseClient` of `@supabase/supabase-js`), as `context.supabase`.
 *
 * @example
 * ```ts
 * import type { SupabaseClient } from "@pgflow/shared";
 *
 * async function count(supabase: SupabaseClient): Promise<number | null> {
 *   return (await supabase.from("threads").select("*", { count: "exact", head: true })).count;
 * }
 * ```
 */
export type SupabaseClient = SupabaseJsClient;
