import type { AnyFlow } from "../dsl/extract.ts";
import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { pairKey, pairKeys } from "../util/pair_key.ts";
import type { SupportedPair } from "./claim.ts";

/**
 * The support set of a worker of `flows` on `queue`: the exact (flow, step) pairs routed there,
 * read from the **persisted** routes (after compilation), so the worker claims what the database
 * will send there, not what its own code merely believes; and of those, the ones a step of
 * `flows` defines, so every pair claimed has a handler.
 */
export async function queueSupportSet(
  sql: Sql,
  queue: string,
  flows: readonly AnyFlow[],
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<SupportedPair[]> {
  const rows = await bounded(
    sql<{ flow_slug: string; step_slug: string }[]>`
      select flow_slug, step_slug
      from pgflow.queue_support_set(${queue}, ${flows.map((f) => f.slug)}::text[])
      order by flow_slug, step_slug`,
    "queue_support_set",
    timeoutMs,
  );
  const handled = pairKeys(flows.flatMap((f) => f.steps().map((s) => [f.slug, s.slug] as const)));
  return rows
    .filter((row) => handled.has(pairKey(row.flow_slug, row.step_slug)))
    .map((row) => [row.flow_slug, row.step_slug] as const);
}
