import { pgMessage } from "../platform/pg_message.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { SupportedPair } from "../task/claim.ts";
import { type RunningTasks, runTasks } from "../task/run_tasks.ts";
import { openWakeups, type WorkerWakeups } from "../task/wakeups.ts";
import { Slots } from "../util/slots.ts";
import { readWorkerEnv, type WorkerEnv } from "../platform/env.ts";
import { maskError } from "../platform/database_url.ts";
import { createLogger, type Logger, markLogged } from "../platform/logger.ts";
import { ActivityLog } from "../platform/activity.ts";
import { prepareSupabaseClient } from "../platform/supabase_client.ts";
import type { WorkerStartArgs, WorkerTarget } from "../routing/selection.ts";
import { type EdgeWorkerConfig, isUuid, resolveConfig, type ResolvedConfig } from "./config.ts";
import { WorkerStartupError } from "./errors.ts";
import type { FlowWorker, WorkerState } from "./flow_worker.ts";
import { closePool, END_MARGIN_MS, logAbandoned, waitAtMost } from "./shutdown.ts";
import { compileDefinitions, resolveSupportSet, verifySchemaVersion } from "./startup.ts";
import { logSummaries } from "./summary.ts";
import { recoverStalledTasks } from "./recovery.ts";
import { type ResolvedTarget, resolveTarget, type SelectionInput } from "./target.ts";
import { connectWorker } from "./worker_pool.ts";
import { beatUntilStopped, markStopped, registerWorker } from "./worker_row.ts";

/**
 * Creates a worker without starting it. Types match `EdgeWorker.start`: a plain flow takes no
 * queue selection, `withStepQueues(flow)` needs `stepSlug`, routed flows need `queueName` (which
 * autocompletes from their routes). The config is checked at once (`WorkerConfigError`).
 *
 * @example
 * ```ts
 * import { createWorker, Flow, routeFlow } from "@pgflow/shared";
 *
 * const v1 = new Flow<{ id: string }>({ slug: "triage_v1" }).step({ slug: "a" }, (i) => i.id);
 * const worker = createWorker([routeFlow(v1, { queues: { a: "thread_processing" } })], {
 *   queueName: "thread_processing",
 *   connectionString: "postgres://postgres@127.0.0.1:5432/postgres",
 *   maxConcurrent: 4,
 * });
 * // await worker.start(); ... await worker.stop();
 * ```
 */
export function createWorker<const T extends WorkerTarget>(
  target: T,
  ...config: WorkerStartArgs<T, EdgeWorkerConfig>
): FlowWorker {
  return instantiateWorker(target, (config[0] ?? {}) as EdgeWorkerConfig & SelectionInput);
}

/** {@link createWorker} without the typed selection (for the platform adapters). */
export function instantiateWorker(
  target: WorkerTarget,
  config: EdgeWorkerConfig & SelectionInput,
): FlowWorker {
  return new Worker(target, config);
}

/** A worker's life (see {@link FlowWorker}); what it runs is the task path's (`runTasks`). */
class Worker implements FlowWorker {
  readonly id: string;
  readonly queueName: string;
  readonly functionName: string;
  readonly done: Promise<void>;
  #state: WorkerState = "created";
  #supportSet: readonly SupportedPair[] = [];
  readonly #config: ResolvedConfig;
  readonly #env: WorkerEnv;
  readonly #target: ResolvedTarget;
  readonly #log: Logger;
  readonly #slots: Slots;
  readonly #pollStop = new AbortController();
  readonly #shutdown = new AbortController();
  readonly #timersStop = new AbortController();
  #sql?: Sql;
  #ownsPool = false;
  /** Set once `register_worker` has answered: a stop during startup marks the row stopped. */
  #registered = false;
  /** The startup ended early because `stop()` came while it ran. */
  #startCancelled = false;
  #starting?: Promise<void>;
  #stopping?: Promise<void>;
  #tasks?: RunningTasks;
  /** The timers that end with the worker (the task path's cancellation checks among them). */
  #timers: Promise<void>[] = [];
  #activity?: ActivityLog;
  #wakeups?: WorkerWakeups;
  #resolveDone!: () => void;
  /** The platform's `beforeunload` reason, once it came: no handler starts after it. */
  #unloading?: string;

  constructor(target: WorkerTarget, config: EdgeWorkerConfig & SelectionInput) {
    this.#env = readWorkerEnv(config?.env);
    this.#config = resolveConfig(config, this.#env);
    this.#target = resolveTarget(target, config);
    this.queueName = this.#target.queue;
    this.functionName = this.#config.functionName ?? this.#target.queue;
    const executionId = this.#env.SB_EXECUTION_ID;
    this.id = this.#config.workerId ??
      (executionId !== undefined && isUuid(executionId) ? executionId : crypto.randomUUID());
    this.#log = (this.#config.logger ?? createLogger({ level: this.#config.logLevel }))
      .with({ worker: this.id, queue: this.queueName });
    this.#slots = new Slots(this.#config.maxConcurrent);
    this.done = new Promise((resolve) => (this.#resolveDone = resolve));
  }

  get state(): WorkerState {
    return this.#state;
  }

  get supportSet(): readonly SupportedPair[] {
    return this.#supportSet;
  }

  get inFlight(): number {
    return this.#slots.running;
  }

  start(): Promise<void> {
    if (this.#state !== "created") {
      return Promise.reject(
        new WorkerStartupError(`worker ${this.id} was already started (state: ${this.#state})`),
      );
    }
    this.#state = "starting";
    // `#starting` is what a stop waits for; the caller's promise also waits for the stop that
    // cancelled the startup, so it resolves with the worker stopped.
    this.#starting = this.#startup().catch(async (error) => {
      this.#state = "failed";
      await this.#closeWakeups();
      await this.#closePool();
      this.#resolveDone();
      const failure = maskError(
        error instanceof WorkerStartupError ? error : new WorkerStartupError(
          `worker for queue "${this.queueName}" could not start: ${pgMessage(error)}`,
        ),
        this.#config.connectionString,
      );
      // Logged here, once; marked so the entry points that catch it do not print it again.
      this.#log.error("worker failed to start", { error: failure.message });
      throw markLogged(failure);
    });
    return this.#starting.then(() => this.#startCancelled ? this.#stopping : undefined);
  }

  /**
   * Whether a stop came while the startup ran: checked between its steps, so a worker told to
   * stop (or that its platform unloads) makes no read, and registers no row it need not.
   */
  #stopRequested(): boolean {
    if (this.#pollStop.signal.aborted) this.#startCancelled = true;
    return this.#startCancelled;
  }

  async #startup(): Promise<void> {
    const config = this.#config;
    const timeoutMs = config.queryTimeoutMs;
    const db = await connectWorker(config);
    this.#sql = db.sql;
    this.#ownsPool = db.owned;
    const sql = db.sql;
    this.#log.info("database connection", { ...db.connection, preparedStatements: db.prepared });
    if (this.#stopRequested()) return;
    await verifySchemaVersion(sql, this.#log, timeoutMs);
    await compileDefinitions(sql, this.#target.definitions, this.#log, timeoutMs);
    if (this.#stopRequested()) return;
    const supported = await resolveSupportSet(sql, this.#target, timeoutMs);
    this.#supportSet = supported;
    const supabase = await prepareSupabaseClient(this.#env);
    if (this.#stopRequested()) return;
    // The support set is recorded with the worker so the coverage check can see what it serves.
    await registerWorker(sql, this, supported, timeoutMs);
    this.#registered = true;
    if (this.#stopRequested()) return;
    const log = this.#log;
    this.#wakeups = await openWakeups(
      sql,
      this.queueName,
      supported,
      config.wakeups,
      db.connection,
      log,
      timeoutMs,
    );
    if (this.#stopRequested()) return;
    this.#state = "running";
    log.info("worker started", {
      function: this.functionName,
      supported: supported.map(([flow, step]) => `${flow}.${step}`),
      wakeups: this.#wakeups.mode,
    });
    this.#launch(sql, supabase);
  }

  #launch(sql: Sql, supabase: () => SupabaseClient): void {
    const config = this.#config;
    const log = this.#log;
    const activity = this.#activity = new ActivityLog(log);
    const timers = this.#timersStop.signal;
    const timing = (intervalMs: number) => ({ intervalMs, timeoutMs: config.queryTimeoutMs });
    this.#tasks = runTasks({
      sql,
      queue: this.queueName,
      workerId: this.id,
      flows: this.#target.flows,
      supported: this.#supportSet,
      options: config,
      env: this.#env,
      supabase,
      slots: this.#slots,
      log,
      activity,
      wakeups: this.#wakeups?.wakeups,
      polling: this.#pollStop.signal,
      shutdown: this.#shutdown.signal,
      timers,
      unloading: () => this.#unloading !== undefined,
    });
    const heartbeat = timing(config.heartbeatIntervalMs);
    const recovery = recoverStalledTasks(
      sql,
      log,
      timing(config.stalledRecoveryIntervalMs),
      timers,
    );
    this.#timers = [
      this.#tasks.checks,
      beatUntilStopped(
        sql,
        this.id,
        log,
        heartbeat,
        timers,
        () => this.#state === "running",
        () => {
          void this.#stop(false);
        },
      ),
      logSummaries(sql, this.queueName, activity, timing(config.logSummaryIntervalMs), timers),
      ...(recovery === undefined ? [] : [recovery]),
    ];
  }

  stop(options?: { readonly unloading?: string }): Promise<void> {
    if (options?.unloading !== undefined && this.#unloading === undefined) {
      this.#unloading = options.unloading;
      this.#log.info("beforeunload: claiming stops", { reason: options.unloading });
    }
    return this.#stop(true);
  }

  #stop(abortHandlers: boolean): Promise<void> {
    // At once, whatever the state: a loop not launched yet never reads, a running one makes no
    // read after this (one under way finishes), and a startup under way stops at its next step.
    this.#pollStop.abort();
    // A stop during a drain upgrades it: handlers are now told to finish.
    if (abortHandlers && this.#state === "draining" && !this.#shutdown.signal.aborted) {
      this.#log.info("shutdown: signalling handlers", {});
      this.#shutdown.abort();
    }
    this.#stopping ??= this.#stopSequence(abortHandlers);
    return this.#stopping;
  }

  async #stopSequence(abortHandlers: boolean): Promise<void> {
    if (this.#state === "starting") await this.#starting?.catch(() => {});
    if (this.#state === "created" || this.#state === "failed") {
      this.#state = "stopped";
      this.#resolveDone();
      return;
    }
    if (this.#state === "starting") return await this.#stopStartup();
    this.#state = abortHandlers ? "stopping" : "draining";
    const config = this.#config;
    const log = this.#log;
    const tasks = this.#tasks!;
    log.info("shutdown: polling stopped", {});
    if (abortHandlers) {
      log.info("shutdown: signalling handlers", {});
      this.#shutdown.abort();
    }
    // Every wait below has a bound, so a stop ends whatever state the database left the worker
    // in; one that runs out is logged, naming what was left behind.
    const readBound = config.maxPollSeconds * 1000 + config.queryTimeoutMs;
    await waitAtMost(tasks.loop, readBound, "the read under way", log);
    if (tasks.leftAtUnload > 0) {
      log.warn("tasks claimed as the platform unloaded were not started", {
        count: tasks.leftAtUnload,
        action: "none: stalled recovery takes them back after their timeout + 30 s",
      });
    }
    // On the LISTEN connection, beside the rest (its calls have their own bound).
    const wakeupsClosed = this.#closeWakeups();
    // As soon as polling has really ended, before the drain: the platform may kill the isolate
    // any moment now, and a stopped row lets a replacement start without waiting for the
    // heartbeat to go stale.
    await markStopped(this.#sql!, this.id, log, config.queryTimeoutMs);
    // In-flight tasks get at most shutdownTimeoutMs: a handler that ignores shutdownSignal, or a
    // report that cannot get through, never holds a stopping worker for ever.
    const bound = config.shutdownTimeoutMs;
    log.info("shutdown: waiting for in-flight tasks", {
      inFlight: this.inFlight,
      timeoutMs: bound,
    });
    const abandoned = await tasks.settle(bound);
    if (abandoned !== undefined) logAbandoned(abandoned, bound, log);
    this.#timersStop.abort();
    await waitAtMost(
      Promise.allSettled([wakeupsClosed, ...this.#timers]),
      config.queryTimeoutMs + END_MARGIN_MS,
      "the timers' last calls and the LISTEN connection",
      log,
    );
    // The last, partial interval: what happened since the previous summary is not lost.
    this.#activity?.flush();
    await this.#closePool();
    this.#stopped();
  }

  /**
   * The end of a startup that a stop cut short: nothing was read; what it had set up (the LISTEN,
   * the worker row, the pool) is undone in the order of a normal stop.
   */
  async #stopStartup(): Promise<void> {
    this.#state = "stopping";
    const log = this.#log;
    log.info("shutdown: stopped while starting; nothing was read", { reason: this.#unloading });
    const wakeupsClosed = this.#closeWakeups();
    if (this.#registered) await markStopped(this.#sql!, this.id, log, this.#config.queryTimeoutMs);
    await waitAtMost(wakeupsClosed, this.#config.queryTimeoutMs + END_MARGIN_MS, "the LISTEN", log);
    await this.#closePool();
    this.#stopped();
  }

  #stopped(): void {
    this.#state = "stopped";
    this.#log.info("shutdown: stopped", {});
    this.#resolveDone();
  }

  async #closeWakeups(): Promise<void> {
    const wakeups = this.#wakeups;
    this.#wakeups = undefined;
    await wakeups?.close().catch((error) =>
      this.#log.warn("could not close the LISTEN connection", { error: (error as Error).message })
    );
  }

  async #closePool(): Promise<void> {
    if (!this.#ownsPool || this.#sql === undefined) return;
    this.#ownsPool = false;
    await closePool(this.#sql, this.#log);
  }
}
