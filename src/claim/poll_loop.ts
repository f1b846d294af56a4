import type postgres from "postgres";
import type { PgmqMessageRecord } from "../dsl/context.ts";
import type { Logger } from "../platform/logger.ts";
import { backoffDelay, retry, sleep } from "../worker/backoff.ts";
import { type ClaimedTask, claimTasks, type SupportedPair } from "./claim.ts";
import { readMessages } from "./read.ts";
import type { Slots } from "./slots.ts";

/** What the poll loop needs. */
export interface PollLoopDeps {
  /** The worker's pool. */
  readonly sql: postgres.Sql;
  /** The one queue polled. */
  readonly queue: string;
  /** The registered worker id. */
  readonly workerId: string;
  /** The exact (flow, step) pairs to claim. */
  readonly supported: readonly SupportedPair[];
  /** Most messages per read. */
  readonly batchSize: number;
  /** Seconds a read reserves messages. */
  readonly visibilityTimeout: number;
  /** Seconds a read may wait. */
  readonly maxPollSeconds: number;
  /** Re-check interval while a read waits. */
  readonly pollIntervalMs: number;
  /** The concurrency bound. */
  readonly slots: Slots;
  /** Logger carrying worker and queue. */
  readonly log: Logger;
  /** Aborted to stop polling (in-flight tasks are not affected). */
  readonly signal: AbortSignal;
  /** Runs one claimed task to its end. */
  readonly execute: (task: ClaimedTask, message: PgmqMessageRecord) => Promise<unknown>;
}

/** The longest the loop waits for more free slots before reading (see runPollLoop). */
const FILL_WAIT_MS = 5;

/** How many times a claim is retried before its messages are left to reappear. */
const CLAIM_ATTEMPTS = 5;

/**
 * Polls until `signal` aborts: wait for a free slot, read at most that many messages once, claim
 * them in one call with the exact support set, start each claimed task in its own slot, warn about
 * the rest. Database errors back off exponentially (with jitter) instead of spinning.
 */
export async function runPollLoop(deps: PollLoopDeps): Promise<void> {
  const { log, signal, slots } = deps;
  let failures = 0;
  // Claims name the set registered with the worker (the same pairs as deps.supported), so a large
  // support set is not sent and parsed again with every batch. Should the worker's row vanish
  // (an operator deleted it), claiming goes on with the explicit pairs instead of stopping.
  let pairs: readonly SupportedPair[] | null = null;
  const claim = async (ids: string[]) => {
    try {
      return await claimTasks(deps.sql, deps.queue, ids, deps.workerId, pairs);
    } catch (error) {
      if (pairs !== null || !isUnregistered(error)) throw error;
      log.warn("worker row not found; claiming with the explicit support set", {});
      pairs = deps.supported;
      return await claimTasks(deps.sql, deps.queue, ids, deps.workerId, pairs);
    }
  };
  while (!signal.aborted) {
    await slots.waitForFree(signal);
    // Under load slots free up one at a time, and reading at once would make batches of one or
    // two, paying a read and a claim round trip per task. So wait a moment for half the batch to
    // be free. Bounded: a slow task never holds the rest back; and no wait at all for an idle
    // worker, whose slots are all free, so pickup latency is unchanged.
    await slots.waitForFreeAtLeast(
      Math.min(deps.batchSize, Math.ceil(slots.capacity / 2)),
      FILL_WAIT_MS,
      signal,
    );
    if (signal.aborted) break;
    try {
      const qty = Math.min(deps.batchSize, slots.free);
      const messages = await readMessages(deps.sql, deps.queue, {
        visibilityTimeout: deps.visibilityTimeout,
        qty,
        maxPollSeconds: deps.maxPollSeconds,
        pollIntervalMs: deps.pollIntervalMs,
      });
      failures = 0;
      if (messages.length === 0) continue;
      // Claim even when a stop arrived during the read: the messages are reserved for us, and a
      // claim that runs its tasks beats leaving them hidden for the visibility timeout.
      const ids = messages.map((m) => m.msg_id);
      const result = await retry(
        () => claim(ids),
        {
          attempts: CLAIM_ATTEMPTS,
          onRetry: (error, attempt, delayMs) =>
            log.warn("claim failed; retrying", {
              error: (error as Error).message,
              retry: attempt,
              delayMs,
            }),
        },
      );
      const byId = new Map(messages.map((m) => [m.msg_id, m]));
      for (const task of result.claimed) {
        const message = byId.get(task.messageId)!;
        slots.run(() => deps.execute(task, message));
      }
      for (const { messageId, disposition } of result.skipped) {
        // Queue and id only: the body never explains or authorises anything.
        log.warn(`message not claimed (${disposition})`, { messageId, disposition });
      }
      log.debug("batch", { read: messages.length, claimed: result.claimed.length });
    } catch (error) {
      failures++;
      const delayMs = backoffDelay(failures);
      log.error("poll failed; backing off", {
        error: (error as Error).message,
        failures,
        delayMs,
      });
      await sleep(delayMs, signal);
    }
  }
}

/** start_tasks' answer to `supported => NULL` for a worker id with no row. */
function isUnregistered(error: unknown): boolean {
  const e = error as { code?: string; message?: string };
  return e?.code === "22023" && /is not registered/.test(e.message ?? "");
}
