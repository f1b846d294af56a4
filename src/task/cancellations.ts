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
 * The runs of a worker's in-flight tasks, each task with the controller its handler's `ctx.signal`
 * follows: {@link check} aborts the handlers of every run that was cancelled (`pgflow.cancel_run`),
 * so a well-written handler stops early. Their reports are then late, and SQL ignores them.
 */
export class RunCancellations {
  readonly #sql: Sql;
  readonly #log: Logger;
  readonly #timeoutMs: number;
  readonly #byRun = new Map<string, Map<AbortController, ClaimedTask>>();

  constructor(sql: Sql, log: Logger, timeoutMs: number) {
    this.#sql = sql;
    this.#log = log;
    this.#timeoutMs = timeoutMs;
  }

  /**
   * Tracks `task` until `done` is called; its signal aborts when its run is cancelled, `shutdown`
   * aborts, or `timeoutSeconds` (its step's effective timeout) pass, with a {@link StepTimedOut}.
   */
  track(
    task: ClaimedTask,
    shutdown: AbortSignal,
    timeoutSeconds?: number,
  ): { signal: AbortSignal; done(): void } {
    const runId = task.runId;
    const controller = new AbortController();
    let tasks = this.#byRun.get(runId);
    if (tasks === undefined) this.#byRun.set(runId, tasks = new Map());
    tasks.set(controller, task);
    const held = tasks;
    // A listener removed when the task ends, rather than AbortSignal.any: a worker lives long and
    // runs many tasks, and nothing of a finished task may stay attached to its shutdown signal.
    const onShutdown = () => controller.abort(shutdown.reason);
    if (shutdown.aborted) onShutdown();
    else shutdown.addEventListener("abort", onShutdown, { once: true });
    const timeoutMs = timeoutSeconds === undefined ? Infinity : timeoutSeconds * 1000;
    const deadline = timeoutMs > MAX_TIMER_MS ? undefined : setTimeout(
      () =>
        controller.abort(
          new StepTimedOut(`${task.flowSlug}.${task.stepSlug}`, timeoutSeconds!, task.attempt),
        ),
      timeoutMs,
    );
    return {
      signal: controller.signal,
      done: () => {
        clearTimeout(deadline);
        shutdown.removeEventListener("abort", onShutdown);
        held.delete(controller);
        if (held.size === 0 && this.#byRun.get(runId) === held) this.#byRun.delete(runId);
      },
    };
  }

  /** The tasks in flight now (claimed and not yet reported). */
  tasks(): ClaimedTask[] {
    return [...this.#byRun.values()].flatMap((tasks) => [...tasks.values()]);
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
      for (const controller of tasks.keys()) controller.abort(new RunCancelledSignal(runId));
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
