/**
 * What a worker did over one interval, logged as a few lines instead of one per task: a busy
 * worker would otherwise write thousands of lines a minute, and Supabase keeps about 100 events
 * per 10 s per function, so per-task lines at `info` are lost there. One `worker summary` line
 * (tasks completed, failed, retried; handler p50/p95 ms) and one `messages not claimed` line per
 * (disposition, flow, step) with its count and what to do. Nothing is written for an interval in
 * which nothing happened.
 *
 * @module
 */
import type { LogFields, Logger } from "./logger.ts";
import { pairKey } from "../util/pair_key.ts";

/** How a task's attempt ended, as the summary counts it. */
export type TaskOutcome = "completed" | "failed" | "retried";

/**
 * Why a message was not claimed: the claim's dispositions other than `claimed`, and `withdrawn`,
 * an `unsupported` task of a pair this worker has a handler for (its flow was recompiled with a
 * changed definition while the worker ran, and its claims on it were withdrawn).
 */
export type UnclaimedDisposition =
  | "started"
  | "ineligible"
  | "unknown"
  | "unsupported"
  | "handed_back"
  | "withdrawn";

/** A message the claim did not take, as the report needs it: never a body or an input. */
export interface UnclaimedMessage {
  /** Why it was not claimed. */
  readonly disposition: UnclaimedDisposition;
  /** The owning task's flow, `null` when no task owns the message. */
  readonly flowSlug: string | null;
  /** The owning task's step, `null` when no task owns the message. */
  readonly stepSlug: string | null;
  /** One message id, named in the report as an example. */
  readonly messageId: string;
}

/** What an operator should do about each kind of unclaimed message. */
const ADVICE: Readonly<Record<UnclaimedDisposition, string>> = {
  unsupported: "no live worker on this queue serves this flow and step: deploy (or start) one " +
    "with its handler on this queue",
  handed_back: "this worker has no handler for this flow and step; it handed the messages back " +
    "at once to the live worker(s) on this queue that serve it (servedBy), so nothing waits, but " +
    "each such read is wasted: give every worker on this queue the same handler set",
  withdrawn: "this flow was recompiled with a changed definition while this worker ran (local " +
    "development), so this worker's old handlers no longer claim its tasks: restart it with " +
    "the new code",
  unknown: "no pgflow task owns these messages: something else sends to this queue; " +
    "remove them (pgmq.delete) or stop the sender",
  started: "the task is still running elsewhere (a handler slower than its step's timeout?); " +
    "stalled recovery takes it back if its worker is gone",
  ineligible: "the task's run or step is no longer started (it failed, completed or was " +
    "skipped): nothing will run it; the message is left to the normal cleanup",
};

/** The dispositions whose report names the live workers that serve the pair. */
const SERVED_BY: ReadonlySet<UnclaimedDisposition> = new Set([
  "unsupported",
  "handed_back",
]);

/**
 * Handler times kept per interval for the percentiles: beyond this many, a uniform sample of them
 * (reservoir sampling), so a long interval on a busy worker costs bounded memory (80 KB).
 */
const MAX_SAMPLES = 10_000;

interface Group {
  readonly disposition: UnclaimedDisposition;
  readonly flow: string | null;
  readonly step: string | null;
  count: number;
  readonly example: string;
}

/**
 * Counts task outcomes and unclaimed messages, and writes them once per interval (`flush`).
 *
 * @example
 * ```ts
 * import { ActivityLog } from "./activity.ts";
 * import { createLogger } from "./logger.ts";
 *
 * const activity = new ActivityLog(createLogger());
 * activity.task("completed", 12);
 * activity.flush(); // {"event":"worker summary","completed":1,...,"p50Ms":12,"p95Ms":12}
 * ```
 */
export class ActivityLog {
  readonly #log: Logger;
  #completed = 0;
  #failed = 0;
  #retried = 0;
  #ms: number[] = [];
  #timed = 0;
  #groups = new Map<string, Group>();
  #since = Date.now();

  /** @param log the worker's logger (it carries worker and queue) */
  constructor(log: Logger) {
    this.#log = log;
  }

  /** Counts one finished attempt and its handler time. */
  task(outcome: TaskOutcome, handlerMs: number): void {
    if (outcome === "completed") this.#completed++;
    else if (outcome === "failed") this.#failed++;
    else this.#retried++;
    this.#timed++;
    if (this.#ms.length < MAX_SAMPLES) this.#ms.push(handlerMs);
    else {
      const slot = Math.floor(Math.random() * this.#timed);
      if (slot < MAX_SAMPLES) this.#ms[slot] = handlerMs;
    }
  }

  /** Counts one message the claim did not take. */
  unclaimed(message: UnclaimedMessage): void {
    const key = `${message.disposition}\u001f${
      pairKey(message.flowSlug ?? "", message.stepSlug ?? "")
    }`;
    const group = this.#groups.get(key);
    if (group !== undefined) group.count++;
    else {
      this.#groups.set(key, {
        disposition: message.disposition,
        flow: message.flowSlug,
        step: message.stepSlug,
        count: 1,
        example: message.messageId,
      });
    }
  }

  /**
   * The (flow, step) pairs of this interval's messages that this worker has no handler for: the
   * report names the live workers that serve each (`flush`'s `servedBy`).
   */
  pairsToDescribe(): [flow: string, step: string][] {
    return [...this.#groups.values()]
      .filter((g) => SERVED_BY.has(g.disposition) && g.flow !== null && g.step !== null)
      .map((g) => [g.flow!, g.step!]);
  }

  /**
   * Writes the interval's lines (if anything happened) and starts the next interval. `servedBy`
   * names, per pair (`flow` U+001F `step`), the live workers on the queue that serve it, for the
   * lines of messages this worker cannot claim; absent when they could not be read.
   */
  flush(servedBy?: ReadonlyMap<string, readonly string[]>): void {
    const intervalMs = Date.now() - this.#since;
    this.#since = Date.now();
    for (const g of this.#groups.values()) {
      const servers = servedBy !== undefined && SERVED_BY.has(g.disposition)
        ? servedBy.get(pairKey(g.flow!, g.step!)) ?? []
        : undefined;
      const fields: LogFields = {
        disposition: g.disposition,
        ...(g.flow === null ? {} : { flow: g.flow }),
        ...(g.step === null ? {} : { step: g.step }),
        count: g.count,
        exampleMessageId: g.example,
        intervalMs,
        ...(servers === undefined ? {} : { servedBy: servers.join(", ") || "none" }),
        action: ADVICE[g.disposition],
      };
      this.#log.warn(`messages not claimed (${g.disposition})`, fields);
    }
    this.#groups = new Map();
    const total = this.#completed + this.#failed + this.#retried;
    if (total > 0) {
      const sorted = this.#ms.sort((a, b) => a - b);
      this.#log.info("worker summary", {
        completed: this.#completed,
        failed: this.#failed,
        retried: this.#retried,
        p50Ms: percentile(sorted, 0.5),
        p95Ms: percentile(sorted, 0.95),
        intervalMs,
      });
    }
    this.#completed =
      this.#failed =
      this.#retried =
      this.#timed =
        0;
    this.#ms = [];
  }
}

/** The nearest-rank percentile of sorted values. */
function percentile(sorted: readonly number[], p: number): number {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))];
}
