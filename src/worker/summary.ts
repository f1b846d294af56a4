import type { ActivityLog } from "../platform/activity.ts";
import { bounded } from "../platform/deadline.ts";
import type { Sql } from "../platform/types.ts";
import { pairServers } from "../operations/coverage.ts";
import { every } from "../util/periodic.ts";

/**
 * The worker's summary line, every `intervalMs` until `signal` aborts: what its tasks came to and
 * which messages it could not claim, naming the live workers that serve those (read at most
 * `timeoutMs`; the line goes without them otherwise).
 */
export function logSummaries(
  sql: Sql,
  queue: string,
  activity: ActivityLog,
  timing: { readonly intervalMs: number; readonly timeoutMs: number },
  signal: AbortSignal,
): Promise<void> {
  return every(timing.intervalMs, signal, async () => {
    const pairs = activity.pairsToDescribe();
    const servedBy = pairs.length === 0 ? undefined : await bounded(
      pairServers(sql, queue, pairs),
      "read the workers that serve unclaimed pairs",
      timing.timeoutMs,
    ).catch(() => undefined);
    activity.flush(servedBy);
  });
}
