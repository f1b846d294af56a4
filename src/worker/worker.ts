import { WorkerShutdown } from "../dsl/abort_reasons.ts";
import { readWorkerEnv, type WorkerEnv } from "../platform/env.ts";
import { createLogger, type Logger, markLogged } from "../platform/logger.ts";
import { ActivityLog } from "../platform/activity.ts";
import { guardClosedSocketWrites } from "../platform/closed_socket_write.ts";
import type { WorkerTarget } from "../routing/selection.ts";
import type { SupportedPair } from "../task/claim.ts";
import { type RunningTasks, runTasks } from "../task/run_tasks.ts";
import { Slots } from "../util/slots.ts";
import { type EdgeWorkerConfig, isUuid, resolveConfig, type ResolvedConfig } from "./config.ts";
import { WorkerStartupError } from "./errors.ts";
import type { FlowWorker, WorkerState } from "./flow_worker.ts";
import {
  closePool,
  closeWakeups,
  drainTasks,
  END_MARGIN_MS,
  logLeftAtUnload,
  waitAtMost,
} from "./shutdown.ts";
import { type Acquired, type Ready, startUp, startupFailure } from "./startup.ts";
import { type ResolvedTarget, resolveTarget, type SelectionInput } from "./target.ts";
import { startTimers } from "./timers.ts";
import { markStopped } from "./worker_row.ts";
import { flushEndedSpans } from "../telemetry/ended_spans.ts";

/** A worker's life (see {@link FlowWorker}); what it runs is the task path's (`runTasks`). */
export class Worker implements FlowWorker {
  readonly id: string;
  readonly queueName: string;
  readonly functionName: string;
  readonly done: Promise<void>;
  #state: WorkerState = "created";
  /** What the startup set up, which a stop or a failure undoes. */
  readonly #acquired: Acquired = { registered: false };
  readonly #config: ResolvedConfig;
  readonly #env: WorkerEnv;
  readonly #target: ResolvedTarget;
  readonly #log: Logger;
  readonly #slots: Slots;
  readonly #pollStop = new AbortController();
  readonly #shutdown = new AbortController();
  readonly #timersStop = new AbortController();
  /** The startup ended early because `stop()` came while it ran. */
  #startCancelled = false;
  #starting?: Promise<void>;
  #stopping?: Promise<void>;
  #tasks?: RunningTasks;
  /** The timers that end with the worker (the task path's cancellation checks among them). */
  #timers: Promise<void>[] = [];
  #activity?: ActivityLog;
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
    return this.#acquired.supported ?? [];
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
      await closeWakeups(this.#acquired, this.#log);
      await closePool(this.#acquired, this.#log);
      this.#resolveDone();
      const failure = startupFailure(error, this.queueName, this.#config.connectionString);
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
    guardClosedSocketWrites(this.#log);
    const ready = await startUp(this.#acquired, {
      id: this.id,
      queueName: this.queueName,
      functionName: this.functionName,
      config: this.#config,
      env: this.#env,
      target: this.#target,
      log: this.#log,
      stopRequested: () => this.#stopRequested(),
    });
    if (ready === undefined) return;
    this.#state = "running";
    this.#launch(ready);
  }

  #launch({ sql, supported, supabase }: Ready): void {
    const config = this.#config;
    const log = this.#log;
    const activity = this.#activity = new ActivityLog(log);
    const timers = this.#timersStop.signal;
    this.#tasks = runTasks({
      sql,
      queue: this.queueName,
      workerId: this.id,
      flows: this.#target.flows,
      supported,
      options: config,
      env: this.#env,
      supabase,
      slots: this.#slots,
      log,
      activity,
      wakeups: this.#acquired.wakeups?.wakeups,
      polling: this.#pollStop.signal,
      shutdown: this.#shutdown.signal,
      timers,
      unloading: () => this.#unloading !== undefined,
    });
    this.#timers = [
      this.#tasks.checks,
      ...startTimers({
        sql,
        worker: this,
        log,
        activity,
        config,
        signal: timers,
        running: () => this.#state === "running",
        onDeprecated: () => void this.#stop(false),
      }),
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
      this.#shutdown.abort(this.#shutdownReason());
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
      this.#shutdown.abort(this.#shutdownReason());
    }
    // Every wait below has a bound, so a stop ends whatever state the database left the worker
    // in; one that runs out is logged, naming what was left behind.
    const readBound = config.maxPollSeconds * 1000 + config.queryTimeoutMs;
    await waitAtMost(tasks.loop, readBound, "the read under way", log);
    logLeftAtUnload(tasks, log);
    // On the LISTEN connection, beside the rest (its calls have their own bound).
    const wakeupsClosed = closeWakeups(this.#acquired, this.#log);
    // As soon as polling has really ended, before the drain: the platform may kill the isolate
    // any moment now, and a stopped row lets a replacement start without waiting for the
    // heartbeat to go stale.
    await markStopped(this.#acquired.db!.sql, this.id, log, config.queryTimeoutMs);
    await drainTasks(tasks, this.inFlight, config.shutdownTimeoutMs, log);
    this.#timersStop.abort();
    await waitAtMost(
      Promise.allSettled([wakeupsClosed, ...this.#timers]),
      config.queryTimeoutMs + END_MARGIN_MS,
      "the timers' last calls and the LISTEN connection",
      log,
    );
    // The last, partial interval: what happened since the previous summary is not lost.
    this.#activity?.flush();
    // Run and step spans claimed by the last reports are sent before the pool they need closes.
    await waitAtMost(
      flushEndedSpans(),
      config.queryTimeoutMs + END_MARGIN_MS,
      "the run and step spans",
      log,
    );
    await closePool(this.#acquired, this.#log);
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
    const wakeupsClosed = closeWakeups(this.#acquired, this.#log);
    if (this.#acquired.registered) {
      await markStopped(this.#acquired.db!.sql, this.id, log, this.#config.queryTimeoutMs);
    }
    await waitAtMost(wakeupsClosed, this.#config.queryTimeoutMs + END_MARGIN_MS, "the LISTEN", log);
    await closePool(this.#acquired, this.#log);
    this.#stopped();
  }

  /** What every handler's `ctx.signal` says when this worker stops. */
  #shutdownReason(): WorkerShutdown {
    return new WorkerShutdown(
      this.#unloading === undefined
        ? "stop() was called"
        : `the platform is unloading: ${this.#unloading}`,
    );
  }

  #stopped(): void {
    this.#state = "stopped";
    this.#log.info("shutdown: stopped", {});
    this.#resolveDone();
  }
}
