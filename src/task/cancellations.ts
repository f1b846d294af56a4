import type { Sql } from "../platform/types.ts";
import type { Logger } from "../platform/logger.ts";
import { bounded } from "../platform/deadline.ts";
import { databaseErrorText } from "../platform/pg_message.ts";
import type { ClaimedTask } from "./claim.ts";
import { StepTimedOut } from "../dsl/abort_reasons.ts";

/** setTimeout's longest delay; a step timeout beyond it (24.8 days) is left to stalled recovery. */
const MAX_TIMER_MS = 2_147_483_647;

/**
 * How often a worker with tasks in flight asks whether their runs were cancelled: one small keyed
 * query per second per busy worker, on its pool, so it works the same behind a transaction pooler.
 */
export const CANCEL_CHECK_MS = 1_000;

/**
 * One tracked task: the controller its handler's `ctx.signal` follows, and its deadline.
 * `onTimeout` lets the timeout race hear of the deadline without a listener on the signal.
 *
 * @example
 * ```ts
 * import type { RunCancellations } from "./cancellations.ts";
 * import type { ClaimedTask } from "./claim.ts";
 *
 * declare const cancellations: RunCancellations;
 * declare const task: ClaimedTask;
 * const tracked = cancellations.track(task, 60);
 * tracked.onTimeout((reason) => console.log(reason.message));
 * cancellations.done(tracked);
 * ```
 */
export class TrackedTask {
  /** The task. */
  readonly task: ClaimedTask;
  /** When its step's timeout passes (`performance.now()` ms); `Infinity`: never. */
  readonly deadline: number;
  readonly #controller = new AbortController();
  #timedOut: StepTimedOut | undefined;
  #onTimeout: ((reason: StepTimedOut) => void) | undefined;

  constructor(task: ClaimedTask, deadline: number) {
    this.task = task;
    this.deadline = deadline;
  }

  /** Aborts when the run is cancelled, the worker shuts down or the step's timeout passes. */
  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** Calls `expired` once the step's timeout has passed (at once if it already has). */
  onTimeout(expired: (reason: StepTimedOut) => void): void {
    if (this.#timedOut !== undefined) expired(this.#timedOut);
    else this.#onTimeout = expired;
  }

  /** Aborts the signal with `reason` (a second abort changes nothing). */
  abort(reason: unknown): void {
    this.#controller.abort(reason);
  }

  /**
   * Aborts the signal with the step's timeout, unless it was aborted already (a cancelled run, a
   * shutdown): then the handler is waited out as that abort says, and no timeout is heard.
   */
  timeOut(timeoutSeconds: number): void {
    if (this.#controller.signal.aborted) return;
    const { flowSlug, stepSlug, attempt } = this.task;
    this.#timedOut = new StepTimedOut(`${flowSlug}.${stepSlug}`, timeoutSeconds, attempt);
    this.abort(this.#timedOut);
    this.#onTimeout?.(this.#timedOut);
  }
}

/**
 * The runs of a worker's in-flight tasks, each task with the controller its handler's `ctx.signal`
 * follows: {@link check} aborts the handlers of every run that was cancelled (`pgflow.cancel_run`),
 * so a well-written handler stops early. Their reports are then late, and SQL ignores them.
 *
 * Step timeouts share one timer, armed for the soonest deadline and moved only when a task with
 * a sooner one arrives: a drain of tasks with one timeout starts no timer per task, and each
 * deadline still fires on time. Shutdown is one listener for all the tasks.
 */
export class RunCancellations {
  readonly #sql: Sql;
  readonly #log: Logger;
  readonly #timeoutMs: number;
  readonly #shutdown: AbortSignal;
  readonly #byRun = new Map<string, Set<TrackedTask>>();
  /** The tasks with a deadline, and the timeout (s) each was given. */
  readonly #timed = new Map<TrackedTask, number>();
  #timer: ReturnType<typeof setTimeout> | undefined;
  #armedFor = Infinity;

  constructor(sql: Sql, log: Logger, timeoutMs: number, shutdown: AbortSignal) {
    this.#sql = sql;
    this.#log = log;
    this.#timeoutMs = timeoutMs;
    this.#shutdown = shutdown;
    // One listener for the worker's life, rather than one per task added and removed.
    shutdown.addEventListener("abort", () => {
      for (const tasks of this.#byRun.values()) {
        for (const tracked of tasks) tracked.abort(shutdown.reason);
      }
    }, { once: true });
  }

  /**
   * Tracks `task` until `done` is called; its signal aborts when its run is cancelled, the worker
   * shuts down, or `timeoutSeconds` (its step's effective timeout) pass, with a
   * {@link StepTimedOut}.
   */
  track(task: ClaimedTask, timeoutSeconds?: number): TrackedTask {
    const timeoutMs = timeoutSeconds === undefined ? Infinity : timeoutSeconds * 1000;
    // Beyond setTimeout's longest delay the task is left to stalled recovery.
    const timed = timeoutMs <= MAX_TIMER_MS;
    const tracked = new TrackedTask(task, timed ? performance.now() + timeoutMs : Infinity);
    let tasks = this.#byRun.get(task.runId);
    if (tasks === undefined) this.#byRun.set(task.runId, tasks = new Set());
    tasks.add(tracked);
    if (this.#shutdown.aborted) tracked.abort(this.#shutdown.reason);
    if (timed) {
      this.#timed.set(tracked, timeoutSeconds!);
      if (tracked.deadline < this.#armedFor) this.#arm(tracked.deadline);
    }
    return tracked;
  }

  /** Stops tracking `tracked` (its handler returned and its report was made). */
  done(tracked: TrackedTask): void {
    const runId = tracked.task.runId;
    const tasks = this.#byRun.get(runId);
    if (tasks?.delete(tracked) === true && tasks.size === 0) this.#byRun.delete(runId);
    this.#timed.delete(tracked);
    // No timer outlives the last task: a stopped worker leaves nothing pending.
    if (this.#timed.size === 0) this.#arm(Infinity);
  }

  #arm(deadline: number): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#armedFor = deadline;
    if (deadline === Infinity) return;
    this.#timer = setTimeout(
      () => this.#sweep(),
      Math.max(0, Math.ceil(deadline - performance.now())),
    );
  }

  /** Times out every task whose deadline has come, and arms the timer for the next one. */
  #sweep(): void {
    this.#timer = undefined;
    this.#armedFor = Infinity;
    const now = performance.now();
    let next = Infinity;
    for (const [tracked, timeoutSeconds] of this.#timed) {
      if (tracked.deadline <= now) {
        this.#timed.delete(tracked);
        tracked.timeOut(timeoutSeconds);
      } else if (tracked.deadline < next) next = tracked.deadline;
    }
    this.#arm(next);
  }

  /** The tasks in flight now (claimed and not yet reported). */
  tasks(): ClaimedTask[] {
    return [...this.#byRun.values()].flatMap((tasks) => [...tasks].map((t) => t.task));
  }

  /** One check: aborts the handlers of the in-flight runs that were cancelled. Never throws. */
  async check(): Promise<void> {
    if (this.#byRun.size === 0) return;
    const ids = [...this.#byRun.keys()];
    let cancelled: { run_id: string }[];
    try {
      cancelled = await bounded(
        this.#sql<{ run_id: string }[]>`
          select run_id::text as run_id from pgflow.runs
          where run_id = any (${ids}::uuid[]) and status = 'cancelled'`,
        "read cancelled runs",
        this.#timeoutMs,
      );
    } catch (error) {
      this.#log.warn("could not check for cancelled runs", { error: databaseErrorText(error) });
      return;
    }
    for (const { run_id: runId } of cancelled) {
      const tasks = this.#byRun.get(runId);
      if (tasks === undefined) continue;
      this.#byRun.delete(runId);
      this.#log.info("run cancelled: its handlers are told to stop", {
        runId,
        tasks: tasks.size,
      });
      for (const tracked of tasks) tracked.abort(new RunCancelledSignal(runId));
    }
  }
}

/** The reason a handler's `ctx.signal` carries when its run was cancelled. */
export class RunCancelledSignal extends Error {
  /** The cancelled run. */
  readonly runId: string;

  constructor(runId: string) {
    super(`run ${runId} was cancelled`);
    this.name = "RunCancelledSignal";
    this.runId = runId;
  }
}
