import { setImmediate } from "node:timers";
import type { Sql } from "../platform/types.ts";
import type { Logger } from "../platform/logger.ts";
import { DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { databaseErrorText } from "../platform/pg_message.ts";
import { retry } from "../util/backoff.ts";
import {
  type AttemptIdentity,
  completeTasks,
  type CompletionArrays,
  completionArrays,
  failTask,
  isUnstorableOutput,
  type UncountedEnd,
  unstorableOutputMessage,
} from "./report.ts";

/** What a handler's run came to: its output as exact JSON text, or its error's text. */
export type TaskResult =
  | { readonly kind: "complete"; readonly output: string }
  | {
    readonly kind: "fail";
    readonly error: string;
    readonly stack?: string;
    /** Fail the whole run now, without a retry (a run input that failed its schema). */
    readonly failRun?: boolean;
    /** An attempt that does not count toward `maxAttempts` (deferred, interrupted). */
    readonly uncounted?: UncountedEnd;
  };

/**
 * What became of a report: `completed`; `retried` or `failed` (what `fail_task` decided);
 * `ignored` (a late report: the attempt was already settled); `unreported` (every attempt to
 * report failed: the task stays started and stalled recovery takes it back).
 */
export type ReportOutcome = "completed" | "retried" | "failed" | "ignored" | "unreported";

/** The outcome of one {@link Completer.report}. */
export interface ReportReceipt {
  readonly outcome: ReportOutcome;
  /**
   * Set when the output could not be stored (a Postgres data exception or size limit), so the
   * attempt was failed with this text instead: its SQLSTATE and the error recorded.
   */
  readonly unstorable?: { readonly code: string; readonly error: string };
}

/** How a {@link Completer} reports. */
export interface CompleterOptions {
  /** The worker's pool. */
  readonly sql: Sql;
  /** Calls running at once (keep below the pool size: reads and claims need a connection). */
  readonly maxInFlight?: number;
  /** Most completions per call. */
  readonly maxBatch?: number;
  /** Bound of each call (see `bounded`). */
  readonly timeoutMs?: number;
  /** Tries of each report before the task is left to stalled recovery; see REPORT_ATTEMPTS. */
  readonly attempts?: number;
  /** Where a carried batch's failure is logged. */
  readonly log?: Logger;
}

/**
 * Tries of a report: with the default backoff (250 ms doubling, jittered) six tries span about
 * 4–8 s, which outlasts a pooler or primary switchover; a report still failing after that is left
 * to stalled recovery (the task is requeued once it has been started longer than its step's
 * timeout + 30 s), never retried for ever while the worker's slot is held.
 */
export const REPORT_ATTEMPTS = 6;

interface Pending {
  readonly task: AttemptIdentity;
  readonly output: string;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * The worker's completer: every handler result goes through it to SQL, and nothing else in the
 * worker completes or fails a task.
 *
 * Completions are batched: they are sent once the event loop has run what is ready
 * (`setImmediate`), so the tasks of one batch that finish together go in one
 * `pgflow.complete_tasks` call and an idle worker's single completion waits for no timer; at most
 * `maxInFlight` calls run at once, and completions that arrive meanwhile go together in the next.
 * Better still, the poll loop's next read carries whatever is waiting ({@link carry}: one
 * `pgflow.complete_and_claim` call and one commit for both). A batch that fails is sent again one
 * completion per call (completing is idempotent), so one bad output never fails the others and a
 * lost reply never loses one.
 *
 * Failures are not batched: `fail_task` answers whether the task will be retried, which the
 * worker logs.
 */
/** How long completions handed to a woken poll loop may wait for its read before going alone. */
const READER_GRACE_MS = 20;

export class Completer {
  readonly #sql: Sql;
  readonly #maxInFlight: number;
  readonly #maxBatch: number;
  readonly #timeoutMs: number;
  readonly #attempts: number;
  readonly #log: Logger | undefined;
  #queue: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;
  #wakeReader: ((tasks: readonly AttemptIdentity[]) => boolean) | undefined;
  /** The timer that sends completions a woken reader did not take; cleared with the reader. */
  #grace: ReturnType<typeof setTimeout> | undefined;

  constructor(options: CompleterOptions) {
    this.#sql = options.sql;
    this.#maxInFlight = options.maxInFlight ?? 2;
    this.#maxBatch = options.maxBatch ?? 100;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS;
    this.#attempts = options.attempts ?? REPORT_ATTEMPTS;
    this.#log = options.log;
  }

  /** Completions waiting to be sent (not yet on their way). */
  get waiting(): number {
    return this.#queue.length;
  }

  /**
   * Reports one handler result, retrying failed calls with backoff (`log` says so), and says what
   * became of it. Never rejects: a report that cannot be made is `unreported`. An output Postgres
   * refuses to store is not retried: the attempt fails with that cause now, rather than being left
   * started for stalled recovery to fail as "stalled".
   */
  async report(task: AttemptIdentity, result: TaskResult, log: Logger): Promise<ReportReceipt> {
    try {
      if (result.kind === "fail") {
        return {
          outcome: await this.#retried(
            "fail_task",
            log,
            () =>
              failTask(
                this.#sql,
                task,
                result.error,
                this.#timeoutMs,
                result.stack,
                result.failRun,
                result.uncounted,
              ),
          ),
        };
      }
      try {
        await this.#retried("complete_task", log, () => this.#complete(task, result.output), {
          retryable: (error) => !isUnstorableOutput(error),
        });
        return { outcome: "completed" };
      } catch (error) {
        if (!isUnstorableOutput(error)) throw error;
        const unstorable = {
          code: (error as { code: string }).code,
          error: unstorableOutputMessage(error),
        };
        return { outcome: await this.#fail(task, unstorable.error, log), unstorable };
      }
    } catch (error) {
      log.error(`${result.kind}_task failed; stalled recovery will take the task back`, {
        error: databaseErrorText(error),
      });
      return { outcome: "unreported" };
    }
  }

  /**
   * Set by the worker while its poll loop runs: given the completions waiting, wakes the loop to
   * read at once
   * if it is idle and one of them may release work it would claim, and says whether it did.
   * Completions then go with that read ({@link carry}) instead of a call of their own:
   * when a completion releases the next step of a run on the same queue, the one call completes
   * the task, sends the next step's message and claims it, with no notification and no second
   * round trip in between (the latency of every step of a chain). `undefined` when the loop ends;
   * whatever waits is then sent on its own.
   */
  setReader(wake: ((tasks: readonly AttemptIdentity[]) => boolean) | undefined): void {
    this.#wakeReader = wake;
    if (wake !== undefined) return;
    // Everything waiting goes now: no timer of a stopped loop is left behind.
    clearTimeout(this.#grace);
    this.#grace = undefined;
    this.#pump();
  }

  /**
   * Runs the poll loop's next read with the completions waiting (at most `maxBatch`), which then
   * no longer wait for a call of their own: `read` gets their arrays (or `undefined` when none is
   * waiting) and makes one call for both. Should that call fail, nothing of it happened: the
   * completions go back to be sent on their own, and the read is made again without them (one bad
   * output must not hold reads back); an error of that second read is the caller's.
   */
  async carry<R>(read: (completions: CompletionArrays | undefined) => Promise<R>): Promise<R> {
    if (this.#queue.length === 0) return await read(undefined);
    const batch = this.#queue.splice(0, this.#maxBatch);
    let result: R;
    try {
      result = await read(completionArrays(batch));
    } catch (error) {
      this.#queue.unshift(...batch);
      this.#pump();
      this.#log?.warn("completions with the read failed; reporting them on their own", {
        error: databaseErrorText(error),
      });
      return await read(undefined);
    }
    for (const p of batch) p.resolve();
    return result;
  }

  #fail(task: AttemptIdentity, error: string, log: Logger) {
    return this.#retried("fail_task", log, () => failTask(this.#sql, task, error, this.#timeoutMs));
  }

  #retried<T>(
    what: string,
    log: Logger,
    op: () => Promise<T>,
    options: { retryable?: (error: unknown) => boolean } = {},
  ): Promise<T> {
    return retry(op, {
      attempts: this.#attempts,
      retryable: options.retryable,
      onRetry: (error, retry, delayMs) =>
        log.warn(`${what} failed; retrying`, { error: databaseErrorText(error), retry, delayMs }),
    });
  }

  /** Queues one completion for the next batch (or read); resolves once SQL has done it. */
  #complete(task: AttemptIdentity, output: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ task, output, resolve, reject });
      if (this.#scheduled) return;
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        if (
          this.#queue.length > 0 &&
          this.#wakeReader?.(this.#queue.map((p) => p.task)) === true
        ) {
          // Should the woken loop not read soon after all (it stops, its slots fill up), they go
          // on their own; by then a read has usually taken them and this sends nothing.
          // One timer at a time: it sends everything still waiting, later completions included.
          this.#grace ??= setTimeout(() => {
            this.#grace = undefined;
            this.#pump();
          }, READER_GRACE_MS);
          return;
        }
        this.#pump();
      });
    });
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      this.#inFlight++;
      this.#send(batch).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #send(batch: Pending[]): Promise<void> {
    if (batch.length > 1) {
      try {
        await completeTasks(this.#sql, completionArrays(batch), this.#timeoutMs);
        for (const p of batch) p.resolve();
        return;
      } catch {
        // Fall through: one completion per call, so each gets its own answer.
      }
    }
    await Promise.all(
      batch.map((p) =>
        completeTasks(this.#sql, completionArrays([p]), this.#timeoutMs).then(p.resolve, p.reject)
      ),
    );
  }
}
