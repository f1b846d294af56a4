import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Logger } from "../platform/logger.ts";
import { every } from "../util/periodic.ts";

/** Advisory lock key shared by every worker of a database: one recovery pass at a time. */
const RECOVERY_LOCK = "pgflow.requeue_stalled_tasks";

/**
 * One stalled-task recovery pass, so recovery works without pg_cron. The transaction-level
 * advisory lock lets only one worker of the database do the pass; the others skip it at once
 * instead of queueing behind it (the function is safe concurrently, but duplicate scans are waste).
 * Returns how many tasks were handled, or `null` when another worker held the lock.
 */
export async function requeueStalledTasks(
  sql: Sql,
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<number | null> {
  try {
    const [row] = await bounded(
      // The same pass runs flow control's periodic release (pgflow.tick: what capacity allows now).
      sql<{ handled: number | null }[]>`
        select case when l.locked then pgflow.requeue_stalled_tasks() end as handled,
               case when l.locked then pgflow.tick() end as released
        from (select pg_try_advisory_xact_lock(hashtext(${RECOVERY_LOCK})) as locked) l`,
      "requeue_stalled_tasks",
      timeoutMs,
    );
    if (row.handled !== null && row.handled > 0) {
      log.warn("stalled tasks recovered", { handled: row.handled });
    }
    return row.handled;
  } catch (error) {
    log.warn("stalled-task recovery failed", { error: (error as Error).message });
    return null;
  }
}

/**
 * {@link requeueStalledTasks} every `intervalMs` until `signal` aborts, the first pass after a
 * random part of the interval (workers started together do not all scan at once); nothing when
 * `intervalMs` is 0 (recovery left to pg_cron).
 */
export function recoverStalledTasks(
  sql: Sql,
  log: Logger,
  timing: { readonly intervalMs: number; readonly timeoutMs: number },
  signal: AbortSignal,
): Promise<void> | undefined {
  const { intervalMs, timeoutMs } = timing;
  if (intervalMs <= 0) return undefined;
  return every(intervalMs, signal, async () => {
    await requeueStalledTasks(sql, log, timeoutMs);
  }, { firstDelayMs: Math.round(intervalMs * Math.random()) });
}
