/**
 * The aliases of a database and where they point (`pgflow.list_aliases()`), for `pgflow status`
 * and the dashboard.
 *
 * @module
 */
import type { Sql } from "../../platform/types.ts";

/** One alias: the stable name callers start, and the concrete version it starts now. */
export interface AliasInfo {
  /** The alias. */
  readonly alias: string;
  /** The concrete flow it points at. */
  readonly flowSlug: string;
  /** When it was created or last moved (ISO 8601). */
  readonly updatedAt: string;
  /** The compiled versions that carry it, oldest first. */
  readonly versions: readonly string[];
}

/**
 * Reads every alias, by name.
 *
 * @example
 * ```ts
 * import { readAliases } from "./aliases.ts";
 *
 * // for (const a of await readAliases(sql)) console.log(`${a.alias} → ${a.flowSlug}`);
 * ```
 */
export async function readAliases(sql: Sql): Promise<AliasInfo[]> {
  const rows = await sql<
    { a: { alias: string; flow_slug: string; updated_at: string; versions: string[] } }[]
  >`
    select a from pgflow.list_aliases() a`;
  return rows.map(({ a }) => ({
    alias: a.alias,
    flowSlug: a.flow_slug,
    updatedAt: a.updated_at,
    versions: a.versions,
  }));
}

/**
 * One alias as a line: `triage → triage_v2 (other versions: triage_v1)`.
 *
 * @example
 * ```ts
 * import { aliasLine } from "./aliases.ts";
 *
 * aliasLine({ alias: "t", flowSlug: "t_v1", updatedAt: "", versions: ["t_v1"] }); // "t → t_v1"
 * ```
 */
export function aliasLine(a: AliasInfo): string {
  const others = a.versions.filter((v) => v !== a.flowSlug);
  return `${a.alias} → ${a.flowSlug}` +
    (others.length > 0 ? ` (other versions: ${others.join(", ")})` : "");
}
