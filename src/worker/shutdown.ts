/**
 * The bounded waits of a worker's stop: each waits at most its bound, and one that runs out is
 * logged, naming what was left behind, so a stop ends whatever state the database left it in.
 *
 * @module
 */
import type { Logger } from "../platform/logger.ts";
import type { RunningTasks } from "../task/run_tasks.ts";
import { settlesWithin } from "../util/within.ts";
import type { Acquired } from "./startup.ts";

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

/** Closes the wake-ups the startup opened (once; a failure to is logged). */
export async function closeWakeups(acquired: Acquired, log: Logger): Promise<void> {
  const wakeups = acquired.wakeups;
  acquired.wakeups = undefined;
  await wakeups?.close().catch((error) =>
    log.warn("could not close the LISTEN connection", { error: (error as Error).message })
  );
}

/**
 * Ends the pool the startup opened, once; not a pool the worker was given. Connections that do
 * not end within the timeout are destroyed: in postgres.js 3.4.7 a connection whose backend was
 * terminated mid-query never ends on its own, so after such a fault every stop takes this long.
 */
export async function closePool(acquired: Acquired, log: Logger): Promise<void> {
  const db = acquired.db;
  if (db === undefined || !db.owned) return;
  acquired.db = { ...db, owned: false };
  await waitAtMost(
    db.sql.end({ timeout: POOL_END_S }),
    POOL_END_S * 1000 + END_MARGIN_MS,
    "the pool",
    log,
  );
  log.info("shutdown: pool closed", {});
}

/**
 * The tasks a read claimed as the platform began to unload were not started: says how many (once
 * the read has ended), and that they were queued again without costing an attempt.
 */
export function logLeftAtUnload(tasks: RunningTasks, log: Logger): void {
  if (tasks.leftAtUnload === 0) return;
  log.warn("tasks claimed as the platform unloaded were not started", {
    count: tasks.leftAtUnload,
    action: "queued again as interrupted attempts (not counted)",
  });
}

/**
 * Waits for in-flight tasks to finish and report, at most `timeoutMs`: a handler that ignores
 * `shutdownSignal`, or a report that cannot get through, never holds a stopping worker for ever.
 * Then names each task it abandons (its attempt ended as `interrupted`, which does not count, and
 * the task queued again; stalled recovery takes back one whose report did not land), and the stop
 * goes on.
 */
export async function drainTasks(
  tasks: RunningTasks,
  inFlight: number,
  timeoutMs: number,
  log: Logger,
): Promise<void> {
  log.info("shutdown: waiting for in-flight tasks", { inFlight, timeoutMs });
  const abandoned = await tasks.settle(timeoutMs);
  if (abandoned === undefined) return;
  log.error("shutdown: in-flight tasks abandoned, their attempts ended as interrupted", {
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
