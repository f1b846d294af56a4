import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Logger } from "../platform/logger.ts";
import { databaseErrorText } from "../platform/pg_message.ts";
import type { SupportedPair } from "../task/claim.ts";
import { retry } from "../util/backoff.ts";
import { every } from "../util/periodic.ts";

/**
 * `pgflow.register_worker`: records the worker, its queue, its function and the exact pairs it
 * serves (the coverage check and the claim's hand-back read them from this row).
 */
export async function registerWorker(
  sql: Sql,
  worker: { readonly id: string; readonly queueName: string; readonly functionName: string },
  supported: readonly SupportedPair[],
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  await bounded(
    sql`select pgflow.register_worker(${worker.id}::uuid, ${worker.queueName}, ${worker.functionName},
                                      ${JSON.stringify(supported)}::text::jsonb)`,
    "register_worker",
    timeoutMs,
  );
}

/**
 * `pgflow.heartbeat`: records that the worker is alive and returns whether it has been deprecated
 * (then it must stop polling and drain). Errors are logged and read as "not deprecated": a missed
 * heartbeat must not stop a healthy worker.
 */
export async function heartbeat(
  sql: Sql,
  workerId: string,
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<boolean> {
  try {
    const [row] = await bounded(
      sql<{ deprecated: boolean }[]>`select pgflow.heartbeat(${workerId}::uuid) as deprecated`,
      "heartbeat",
      timeoutMs,
    );
    return row.deprecated === true;
  } catch (error) {
    log.warn("heartbeat failed", { error: databaseErrorText(error) });
    return false;
  }
}

/**
 * `pgflow.mark_worker_stopped`: a stopped row lets a replacement start (the keep-alive and the
 * coverage check count it gone) without waiting for the heartbeat to go stale.
 */
export async function markWorkerStopped(
  sql: Sql,
  workerId: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  await bounded(
    sql`select pgflow.mark_worker_stopped(${workerId}::uuid)`,
    "mark_worker_stopped",
    timeoutMs,
  );
}

/**
 * {@link markWorkerStopped}, tried three times; a row that could not be marked is logged and left
 * to go stale (the stop goes on).
 */
export async function markStopped(
  sql: Sql,
  workerId: string,
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  try {
    await retry(() => markWorkerStopped(sql, workerId, timeoutMs), { attempts: 3 });
  } catch (error) {
    log.warn("could not mark the worker stopped", { error: (error as Error).message });
  }
}

/**
 * The worker's heartbeat, every `intervalMs` until `signal` aborts, while `running()` says so:
 * once the row says the worker was deprecated, `onDeprecated` is called (the worker drains).
 */
export function beatUntilStopped(
  sql: Sql,
  workerId: string,
  log: Logger,
  beat: {
    readonly intervalMs: number;
    readonly timeoutMs: number;
    readonly signal: AbortSignal;
    readonly running: () => boolean;
    readonly onDeprecated: () => void;
  },
): Promise<void> {
  return every(beat.intervalMs, beat.signal, async () => {
    if (beat.running() && await heartbeat(sql, workerId, log, beat.timeoutMs)) {
      log.warn("worker deprecated; draining in-flight tasks", {});
      beat.onDeprecated();
    }
  });
}
