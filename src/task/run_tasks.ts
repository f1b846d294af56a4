/**
 * The entry of the task path: one call wires the poll loop (read and claim), the execution of
 * each claimed task (its handler, its context, its cancellation) and the completer that reports
 * every result, so a worker starts its tasks with {@link runTasks} and knows nothing else of them.
 *
 * A task's path, file by file: `poll_loop.ts` reads and claims (`read.ts`, waiting in
 * `wakeups.ts` when idle) → `execute.ts` runs the handler (`registry.ts`, `input_check.ts`,
 * `context.ts`, `flow_input.ts`; `cancellations.ts` and `timeout_race.ts` for `ctx.signal` and the
 * step's deadline; `task_log.ts` for its log lines) and turns its result into text
 * (`result.ts`) → `completer.ts` reports it, carried by the loop's next read or sent on its own
 * (`report.ts`; `released_work.ts` wakes an idle loop for a completion that releases its work).
 *
 * @module
 */
import type { Env } from "../dsl/context.ts";
import type { AnyFlow } from "../dsl/extract.ts";
import type { ActivityLog } from "../platform/activity.ts";
import type { Logger } from "../platform/logger.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import { every } from "../util/periodic.ts";
import type { Slots } from "../util/slots.ts";
import { settlesWithin } from "../util/within.ts";
import { CANCEL_CHECK_MS, RunCancellations } from "./cancellations.ts";
import type { ClaimedTask, SupportedPair } from "./claim.ts";
import { Completer } from "./completer.ts";
import { tracingEnabled } from "../telemetry/otel_loader.ts";
import { EndedSpanEmitter } from "../telemetry/ended_spans.ts";
import { executeTask } from "./execute.ts";
import { FlowInputCache } from "./flow_input.ts";
import { RunInputChecks } from "./input_check.ts";
import { runPollLoop } from "./poll_loop.ts";
import { HandlerRegistry } from "./registry.ts";
import { carryReleasedWork } from "./released_work.ts";
import type { QueueWakeups } from "./wakeups.ts";

/** The worker options the task path reads (a worker's resolved config has them all). */
export interface TaskPathOptions {
  /** Most messages per read. */
  readonly batchSize: number;
  /** Seconds a read reserves messages. */
  readonly visibilityTimeout: number;
  /** Seconds a read may wait in the database (or, listening, for a notification). */
  readonly maxPollSeconds: number;
  /** Re-check interval while a read waits. */
  readonly pollIntervalMs: number;
  /** Bound of each database call. */
  readonly queryTimeoutMs: number;
  /** The pool's size: at most half of it reports at once. */
  readonly maxPgConnections: number;
  /** Whether a failure's log line quotes the message of an error from the flow's code. */
  readonly logErrorMessages: boolean;
  /** Largest task input, run input or output taken or sent, in bytes of JSON (`PayloadTooLarge`). */
  readonly maxPayloadBytes?: number;
  /** Extra values merged into every handler context. */
  readonly context?: { readonly [key: string]: unknown };
}

/** What the task path of one worker needs. */
export interface TaskPathDeps {
  /** The worker's pool. */
  readonly sql: Sql;
  /** The one queue polled. */
  readonly queue: string;
  /** The registered worker id. */
  readonly workerId: string;
  /** The flows whose handlers run (dispatched by the flow and step the claim returns). */
  readonly flows: readonly AnyFlow[];
  /** The exact (flow, step) pairs claimed. */
  readonly supported: readonly SupportedPair[];
  /** The worker's options. */
  readonly options: TaskPathOptions;
  /** The environment handlers see (`ctx.env`). */
  readonly env: Env;
  /** Creates (once) or returns the Supabase client (`ctx.supabase`). */
  readonly supabase: () => SupabaseClient;
  /** The concurrency bound (the worker reads how many tasks are in flight from it). */
  readonly slots: Slots;
  /** Logger carrying worker and queue. */
  readonly log: Logger;
  /** Counts outcomes and unclaimed messages for the interval's summary. */
  readonly activity: ActivityLog;
  /** Notifications of work sent to the queue; absent: the loop only polls. */
  readonly wakeups?: QueueWakeups;
  /** Aborted to stop reading (tasks already claimed run on). */
  readonly polling: AbortSignal;
  /** Aborted to tell handlers to finish (`ctx.shutdownSignal`, and every `ctx.signal`). */
  readonly shutdown: AbortSignal;
  /** Aborted once the worker has stopped: the cancellation checks end. */
  readonly timers: AbortSignal;
  /** Whether the platform unloads: a task claimed then is not started (see `leftAtUnload`). */
  readonly unloading: () => boolean;
}

/** A worker's running task path. */
export interface RunningTasks {
  /** The poll loop: settles once polling has stopped and the read under way has ended. */
  readonly loop: Promise<void>;
  /** The checks for cancelled runs (`ctx.signal`): settle once `timers` aborts. */
  readonly checks: Promise<void>;
  /**
   * Tasks a read claimed after the platform began to unload: not started (the isolate may end
   * before a handler could report), their attempts ended at once as `interrupted` (not counted;
   * stalled recovery takes back one whose report did not land).
   */
  readonly leftAtUnload: number;
  /**
   * Waits at most `ms` for the tasks in flight to finish and report; resolves with `undefined`
   * when they did, else with those still in flight, whose attempts it ends as `interrupted` (not
   * counted; queued again at once), waiting at most `queryTimeoutMs` for those reports. A report
   * that does not land leaves the task to stalled recovery.
   */
  settle(ms: number): Promise<readonly ClaimedTask[] | undefined>;
}

/**
 * Starts the task path of one worker: polls until `polling` aborts, runs each claimed task in a
 * slot and reports its result, and checks every second whether the runs of tasks in flight were
 * cancelled (aborting their handlers' `ctx.signal`).
 *
 * @example
 * ```ts
 * import { runTasks } from "./run_tasks.ts";
 * import { Slots } from "../util/slots.ts";
 * import { createLogger } from "../platform/logger.ts";
 * import { ActivityLog } from "../platform/activity.ts";
 * import type { AnyFlow } from "../dsl/extract.ts";
 * import type { Sql } from "../platform/types.ts";
 *
 * declare const sql: Sql;
 * declare const flows: AnyFlow[];
 * const log = createLogger();
 * const stop = new AbortController();
 * const tasks = runTasks({
 *   sql, queue: "demo", workerId: crypto.randomUUID(), flows, supported: [["demo", "a"]],
 *   options: {
 *     batchSize: 10, visibilityTimeout: 5, maxPollSeconds: 2, pollIntervalMs: 50,
 *     queryTimeoutMs: 30_000, maxPgConnections: 4, logErrorMessages: false,
 *   },
 *   env: {}, supabase: () => { throw new Error("no Supabase here"); },
 *   slots: new Slots(10), log, activity: new ActivityLog(log),
 *   polling: stop.signal, shutdown: stop.signal, timers: stop.signal, unloading: () => false,
 * });
 * stop.abort();
 * await tasks.loop;
 * ```
 */
export function runTasks(deps: TaskPathDeps): RunningTasks {
  const { sql, options, log, activity, wakeups, polling } = deps;
  const flowInputs = new FlowInputCache(
    sql,
    undefined,
    options.queryTimeoutMs,
    options.maxPayloadBytes,
  );
  const execute = {
    queue: deps.queue,
    registry: new HandlerRegistry(deps.flows),
    resources: {
      env: deps.env,
      shutdownSignal: deps.shutdown,
      sql,
      supabase: deps.supabase,
      flowInputs,
      inputChecks: new RunInputChecks(flowInputs),
      extra: options.context,
    },
    log,
    // At most half the pool reports at once, so reads and claims always find a connection.
    completer: new Completer({
      sql,
      maxInFlight: Math.max(1, Math.floor(options.maxPgConnections / 2)),
      timeoutMs: options.queryTimeoutMs,
      log,
    }),
    activity,
    logErrorMessages: options.logErrorMessages,
    maxPayloadBytes: options.maxPayloadBytes,
    workerId: deps.workerId,
    spans: tracingEnabled() ? new EndedSpanEmitter(sql, log, options.queryTimeoutMs) : undefined,
  };
  const { completer } = execute;
  // The tasks in flight, by run: for ctx.signal, and for what a bounded drain abandons.
  const cancellations = new RunCancellations(
    sql,
    log,
    options.queryTimeoutMs,
    deps.shutdown,
  );
  completer.setReader(
    wakeups === undefined
      ? undefined
      : carryReleasedWork(wakeups, polling, deps.flows, deps.supported),
  );
  let leftAtUnload = 0;
  // Tasks whose handlers have not returned yet (a task reporting its result is not among them).
  const running = new Set<ClaimedTask>();
  const loop = runPollLoop({
    sql,
    queue: deps.queue,
    workerId: deps.workerId,
    supported: deps.supported,
    batchSize: options.batchSize,
    visibilityTimeout: options.visibilityTimeout,
    maxPollSeconds: options.maxPollSeconds,
    pollIntervalMs: options.pollIntervalMs,
    queryTimeoutMs: options.queryTimeoutMs,
    maxPayloadBytes: options.maxPayloadBytes,
    slots: deps.slots,
    log,
    activity,
    completer,
    wakeups,
    signal: polling,
    execute: async (task, message, handlerDone) => {
      if (deps.unloading()) {
        leftAtUnload++;
        handlerDone();
        // Not run: ended at once as interrupted (not counted, queued again for another worker),
        // rather than left started for stalled recovery to count as a failure 30 s past its timeout.
        await completer.report(task, {
          kind: "fail",
          error: "claimed as the platform began to unload; not started",
          uncounted: { outcome: "interrupted", retryDelay: 0 },
        }, log);
        return;
      }
      running.add(task);
      const ended = () => {
        running.delete(task);
        handlerDone();
      };
      const tracked = cancellations.track(
        task,
        execute.registry.get(task.flowSlug, task.stepSlug)?.timeoutSeconds,
      );
      try {
        await executeTask(execute, task, message, ended, tracked);
      } finally {
        running.delete(task);
        cancellations.done(tracked);
      }
    },
  }).finally(() => completer.setReader(undefined));
  // Handlers of a run cancelled meanwhile are told through ctx.signal.
  const checks = every(CANCEL_CHECK_MS, deps.timers, () => cancellations.check());
  return {
    loop,
    checks,
    get leftAtUnload() {
      return leftAtUnload;
    },
    settle: async (ms) => {
      if (await settlesWithin(deps.slots.drain(), ms)) return undefined;
      const abandoned = cancellations.tasks();
      // The stop is not the handlers' fault: the attempts of those still running end uncounted
      // and their tasks are queued again at once, rather than waiting out their timeout + 30 s
      // for stalled recovery and costing an attempt. Only handlers still running: a result on its
      // way must not be overtaken. Bounded: a stop waits for nothing without a bound.
      const reason = deps.shutdown.reason instanceof Error
        ? deps.shutdown.reason.message
        : "the worker stopped";
      await settlesWithin(
        Promise.all([...running].map((task) =>
          completer.report(task, {
            kind: "fail",
            error: `${reason}; the handler did not end within the shutdown timeout of ${ms} ms`,
            uncounted: { outcome: "interrupted", retryDelay: 0 },
          }, log)
        )),
        options.queryTimeoutMs,
      );
      return abandoned;
    },
  };
}
