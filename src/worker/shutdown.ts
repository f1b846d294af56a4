/**
 * The bounded waits of a worker's stop: each waits at most its bound, and one that runs out is
 * logged, naming what was left behind, so a stop ends whatever state the database left it in.
 *
 * @module
 */
import type { Logger } from "../platform/logger.ts";
import type { Sql } from "../platform/types.ts";
import type { ClaimedTask } from "../task/claim.ts";
import { settlesWithin } from "../util/within.ts";

/** Seconds the pool's connections get to end at a stop before they are destroyed. */
const POOL_END_S = 5;

/** What a stop allows, beyond the bound of the calls it waits for, for connections to end. */
export const END_MARGIN_MS = 2_000;

/** Waits for `promise` at most `ms`; past that, logs what is left behind and goes on. */
export async function waitAtMost(
  promise: Promise<unknown>,
  ms: number,
  what: string,
  log: Logger,
): Promise<void> {
  if (await settlesWithin(promise, ms)) return;
  log.error("shutdown: going on without waiting longer", { for: what, timeoutMs: ms });
}

/**
 * Ends a pool the worker opened. Connections that do not end within the timeout are destroyed:
 * in postgres.js 3.4.7 a connection whose backend was terminated mid-query never ends on its own,
 * so after such a fault every stop takes this long.
 */
export async function closePool(sql: Sql, log: Logger): Promise<void> {
  await waitAtMost(
    sql.end({ timeout: POOL_END_S }),
    POOL_END_S * 1000 + END_MARGIN_MS,
    "the pool",
    log,
  );
  log.info("shutdown: pool closed", {});
}

/**
 * Names each in-flight task a bounded drain abandoned after `timeoutMs` (stalled recovery takes
 * them back once they have run past their step's timeout + 30 s).
 */
export function logAbandoned(
  abandoned: readonly ClaimedTask[],
  timeoutMs: number,
  log: Logger,
): void {
  log.error("shutdown: in-flight tasks abandoned to stalled recovery", {
    timeoutMs,
    abandoned: abandoned.length,
  });
  for (const task of abandoned) {
    log.warn("shutdown: task abandoned", {
      runId: task.runId,
      flow: task.flowSlug,
      step: task.stepSlug,
      taskIndex: task.taskIndex,
      attempt: task.attempt,
    });
  }
}
