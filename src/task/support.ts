import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { SupportedPair } from "./claim.ts";

/**
 * The exact (flow, step) pairs routed to `queue` among `flowSlugs`, read from the **persisted**
 * routes (after compilation), so the worker claims what the database will send there, not what
 * its own code merely believes.
 */
export async function queueSupportSet(
  sql: Sql,
  queue: string,
  flowSlugs: readonly string[],
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<SupportedPair[]> {
  const rows = await bounded(
    sql<{ flow_slug: string; step_slug: string }[]>`
      select flow_slug, step_slug
      from pgflow.queue_support_set(${queue}, ${flowSlugs as string[]}::text[])
      order by flow_slug, step_slug`,
    "queue_support_set",
    timeoutMs,
  );
  return rows.map((row) => [row.flow_slug, row.step_slug] as const);
}
