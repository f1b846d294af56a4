import type { Sql } from "../platform/types.ts";
import type { PgmqMessageRecord } from "../dsl/message.ts";
import type { Logger } from "../platform/logger.ts";
import type { ActivityLog } from "../platform/activity.ts";
import { backoffDelay, sleep } from "../util/backoff.ts";
import type { ClaimedTask, SupportedPair } from "./claim.ts";
import {
  completeAndClaim,
  readAndClaim,
  type ReadAndClaimResult,
  type ReadOptions,
} from "./read.ts";
import type { Completer } from "./completer.ts";
import type { CompletionArrays } from "./report.ts";
import type { Slots } from "../util/slots.ts";
import { pairKey, pairKeys } from "../util/pair_key.ts";
import type { QueueWakeups } from "./wakeups.ts";

/** What the poll loop needs. */
export interface PollLoopDeps {
  /** The worker's pool. */
  readonly sql: Sql;
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
  /**
   * Seconds a read may wait in the database; with wake-ups listening, the longest the loop goes
   * without reading while nothing is announced.
   */
  readonly maxPollSeconds: number;
  /** Re-check interval while a read waits. */
  readonly pollIntervalMs: number;
  /** Margin beyond `maxPollSeconds` after which a read is abandoned (see `bounded`). */
  readonly queryTimeoutMs: number;
  /** A claimed task's input larger than this (bytes of JSON) stays in the database (see read.ts). */
  readonly maxPayloadBytes?: number;
  /** The concurrency bound. */
  readonly slots: Slots;
  /** Logger carrying worker and queue. */
  readonly log: Logger;
  /** Counts messages not claimed, reported once per interval. */
  readonly activity: ActivityLog;
  /** Completions waiting to be reported travel with the next read (see `Completer.carry`). */
  readonly completer?: Pick<Completer, "carry">;
  /** Notifications of work sent to the queue (LISTEN); absent: the loop only polls. */
  readonly wakeups?: QueueWakeups;
  /** Aborted to stop polling (in-flight tasks are not affected). */
  readonly signal: AbortSignal;
  /** Runs one claimed task to its end; calls `handlerDone` when only its report is left. */
  readonly execute: (
    task: ClaimedTask,
    message: PgmqMessageRecord,
    handlerDone: () => void,
  ) => Promise<unknown>;
}

/** The longest the loop waits for more free slots before reading (see runPollLoop). */
const FILL_WAIT_MS = 5;

/**
 * Polls until `signal` aborts: wait for a free slot, then read that many messages once (more when
 * the last read said this worker's own work waits behind another worker's backlog: a read past it)
 * and claim at most that many with the exact support set, in one call (`pgflow.read_and_claim`);
 * start each claimed task in its own slot, count the rest for the interval's report (one warning
 * per disposition, flow and step, not one per message: an unclaimed message comes back every
 * visibility timeout).
 * A failed call rolls its read back, so nothing is left reserved; database errors back off
 * exponentially (with jitter) instead of spinning. With `wakeups`, an empty read is followed by a
 * wait for the queue's next notification (at most `maxPollSeconds`; `pollIntervalMs` while the
 * LISTEN connection is down), not by a wait in the database.
 */
export async function runPollLoop(deps: PollLoopDeps): Promise<void> {
  const { log, signal, slots } = deps;
  let failures = 0;
  // Claims name the set registered with the worker (the same pairs as deps.supported), so a large
  // support set is not sent and parsed again with every batch. Should the worker's row vanish
  // (an operator deleted it), claiming goes on with the explicit pairs instead of stopping.
  let pairs: readonly SupportedPair[] | null = null;
  // A task the claim calls unsupported although this worker has its handler: the registration
  // lost the pair (a recompile in local development), which the report names differently.
  const handled = pairKeys(deps.supported);
  const serves = (flow: string | null, step: string | null) =>
    flow !== null && step !== null && handled.has(pairKey(flow, step));
  const read = (options: ReadOptions, reports: CompletionArrays | undefined) =>
    reports === undefined
      ? readAndClaim(deps.sql, deps.queue, deps.workerId, pairs, options)
      : completeAndClaim(deps.sql, deps.queue, deps.workerId, pairs, options, reports);
  const poll = async (options: ReadOptions, reports: CompletionArrays | undefined) => {
    try {
      return await read(options, reports);
    } catch (error) {
      if (pairs !== null || !isUnregistered(error)) throw error;
      log.warn("worker row not found; claiming with the explicit support set", {});
      pairs = deps.supported;
      return await read(options, reports);
    }
  };
  // Reads in a row that claimed nothing and met only other workers' handed-back messages.
  let blocked = 0;
  // How many messages the next read asks for, when the last one said this worker's own work waits
  // behind another worker's backlog (see pgflow._start_tasks); it still claims at most qty. A read
  // past holds the messages it passes from their worker while it runs, so reads past are paced:
  // they may hold them for a third of a visibility timeout in a row, then for at most a fifth of
  // the time (the budget is min(burst, (now - readPastFrom) / 4) ms, spent by each read past's
  // duration; a read past waits until it is not negative).
  const burstMs = (deps.visibilityTimeout * 1000) / 3;
  let readPast = 0;
  let readPastFrom = -Infinity;
  // Whether the last read came back full: there is more work than this worker takes at a time.
  let full = false;
  while (!signal.aborted) {
    await slots.waitForFree(signal);
    // Under load slots free up one at a time, and reading at once would make batches of one or
    // two, paying a round trip per task. So wait a moment for half the batch to be free. Bounded:
    // a slow task never holds the rest back; and no wait at all for an idle worker, whose slots
    // are all free, so pickup latency is unchanged.
    await slots.waitForFreeAtLeast(
      Math.min(deps.batchSize, Math.ceil(slots.capacity / 2)),
      FILL_WAIT_MS,
      signal,
    );
    if (readPast > 0 && Date.now() < readPastFrom) await sleep(readPastFrom - Date.now(), signal);
    if (signal.aborted) break;
    // With wake-ups the read does not wait in the database: the loop waits for the notification
    // instead, which arrives with the sending transaction's commit, or, while the LISTEN
    // connection is down, re-reads every pollIntervalMs until it is back (and then reads at once:
    // what was sent meanwhile was announced to no one). Without, the read waits in the database.
    const wakeups = deps.wakeups;
    const fallbackMs = wakeups?.listening === true
      ? deps.maxPollSeconds * 1000
      : deps.pollIntervalMs;
    const waitSeconds = wakeups === undefined ? deps.maxPollSeconds : 0;
    const qty = Math.min(deps.batchSize, slots.free);
    const readQty = Math.max(qty, readPast);
    // A read that carries completions does not wait in the database: they must not wait for work
    // to arrive. A read that comes back short is followed by the usual wait.
    const readWith = (reports: CompletionArrays | undefined) => {
      const readWait = reports === undefined ? waitSeconds : 0;
      return poll({
        visibilityTimeout: deps.visibilityTimeout,
        qty,
        ...(readQty > qty ? { readQty } : {}),
        maxPollSeconds: readWait,
        pollIntervalMs: deps.pollIntervalMs,
        timeoutMs: readWait * 1000 + deps.queryTimeoutMs,
        maxInputBytes: deps.maxPayloadBytes,
      }, reports);
    };
    try {
      wakeups?.beforeRead();
      const readStarted = Date.now();
      // While reads come back full, completions go on their own connection at once (the
      // completer's own batch) rather than with this read: the database completes one batch
      // while it claims the next, on two backends, instead of one call doing both in turn while
      // the other core idles. Otherwise the read carries them (one call and one commit for both,
      // and a completion that releases work this worker claims is claimed in the same call).
      const result: ReadAndClaimResult = deps.completer === undefined || full
        ? await readWith(undefined)
        : await deps.completer.carry(readWith);
      full = result.read >= readQty && result.claimed.length === qty && qty > 0;
      failures = 0;
      readPast = result.nextReadQty;
      if (readQty > qty) {
        const now = Date.now();
        const left = Math.min(burstMs, (now - readPastFrom) / 4) - (now - readStarted);
        readPastFrom = now - 4 * left;
      }
      if (result.read === 0) {
        // The fallback timer finds what no notification announces: a retry's delay or a
        // visibility timeout running out, a step's startDelay, a notification lost.
        await wakeups?.wait(fallbackMs, signal);
        continue;
      }
      // Run the claimed tasks even when a stop arrived during the read: they are ours now.
      for (const task of result.claimed) {
        slots.run((release) => deps.execute(task, result.messages.get(task.messageId)!, release));
      }
      for (const skipped of result.skipped) {
        // Identity only: the body never explains or authorises anything. A surplus task is this
        // worker's own, returned for want of a free slot, and a rate-limited one waits for its
        // window: nothing to report.
        const { disposition } = skipped;
        if (disposition !== "surplus" && disposition !== "rate_limited") {
          deps.activity.unclaimed({
            ...skipped,
            disposition: REFUSED.has(disposition) && serves(skipped.flowSlug, skipped.stepSlug)
              ? "withdrawn"
              : disposition,
          });
        }
        log.debug(`message not claimed (${skipped.disposition})`, {
          messageId: skipped.messageId,
          disposition: skipped.disposition,
          flow: skipped.flowSlug ?? undefined,
          step: skipped.stepSlug ?? undefined,
          runId: skipped.runId,
        });
      }
      log.debug("batch", { read: result.read, claimed: result.claimed.length });
      // A read that got fewer than it asked for found every visible message: reading again at
      // once would come back empty. Work sent since is announced (the wait returns at once for a
      // notification that came during the read); the rest is the fallback timer's. A read that
      // claimed nothing waits too: what it read is another worker's (handed back to it,
      // pgflow._start_tasks) or nobody's, and reading again at once would read the same. When it
      // met only other workers' handed-back messages, they may stand at the head of every read
      // until their worker takes them: it looks again after pollIntervalMs, doubled per such read
      // (a busy worker's backlog is not read over and over). When its own work is queued behind
      // them, the claim says how far (nextReadQty), and it reads past them at once.
      blocked = result.claimed.length === 0 &&
          result.skipped.some((s) => s.disposition === "handed_back")
        ? blocked + 1
        : 0;
      // Unless that was already a read past that claimed nothing (its work was not visible after
      // all: a retry's delay, or another worker took it), which waits like any blocked read.
      if (readPast > qty && !(readQty > qty && result.claimed.length === 0)) continue;
      if (result.read < readQty || result.claimed.length === 0) {
        const blockedMs = Math.min(
          fallbackMs,
          deps.pollIntervalMs * 2 ** Math.min(blocked - 1, 16),
        );
        if (wakeups !== undefined) await wakeups.wait(blocked > 0 ? blockedMs : fallbackMs, signal);
        else if (result.claimed.length === 0) await sleep(deps.pollIntervalMs, signal);
      } else {
        // A full read: there may be more than this worker can take, so another idle one looks too.
        wakeups?.nudge(result.claimed.map((t) => [t.flowSlug, t.stepSlug] as const));
      }
    } catch (error) {
      full = false;
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

/** Dispositions of a task outside this worker's registered support set. */
const REFUSED: ReadonlySet<string> = new Set(["unsupported", "handed_back"]);

/**
 * start_tasks' (and so read_and_claim's) answer to `supported => NULL` for a worker id with no
 * row: SQLSTATE `PFW01`, pgflow's own code for an unregistered worker. Recognised by the code
 * alone, never by the message text.
 */
function isUnregistered(error: unknown): boolean {
  return (error as { code?: unknown } | null)?.code === "PFW01";
}
