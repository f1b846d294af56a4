import { pairServers } from "../operations/coverage.ts";
import { connectionProblem, withoutStack } from "../operations/connection_problem.ts";
import { pgMessage } from "../platform/pg_message.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { AnyFlow } from "../dsl/extract.ts";
import type { SupportedPair } from "../claim/claim.ts";
import { runPollLoop } from "../claim/poll_loop.ts";
import { Slots } from "../util/slots.ts";
import { queueSupportSet } from "../claim/support.ts";
import type { ContextResources } from "../dispatch/context.ts";
import { Completer } from "../completion/completer.ts";
import type { TaskAttempt } from "../completion/sql.ts";
import { executeTask } from "../dispatch/execute.ts";
import { FlowInputCache } from "../dispatch/flow_input.ts";
import { RunInputChecks } from "../dispatch/input_check.ts";
import { HandlerRegistry } from "../dispatch/registry.ts";
import { readWorkerEnv, type WorkerEnv } from "../platform/env.ts";
import { type ConnectionInfo, describeConnection } from "../platform/connection_kind.ts";
import { maskError } from "../platform/database_url.ts";
import { openWorkerPool } from "./worker_pool.ts";
import { bounded } from "../platform/deadline.ts";
import { createLogger, type Logger, markLogged } from "../platform/logger.ts";
import { ActivityLog } from "../platform/activity.ts";
import { prepareSupabaseClient } from "../platform/supabase_client.ts";
import type { WorkerStartArgs, WorkerTarget } from "../routing/selection.ts";
import { retry } from "../util/backoff.ts";
import { type EdgeWorkerConfig, isUuid, resolveConfig, type ResolvedConfig } from "./config.ts";
import { WorkerStartupError } from "./errors.ts";
import { heartbeat, markWorkerStopped, registerWorker } from "./worker_row.ts";
import { every } from "../util/periodic.ts";
import { settlesWithin } from "../util/within.ts";
import { requeueStalledTasks } from "./recovery.ts";
import { ScheduleTicker } from "./schedule_ticks.ts";
import { CANCEL_CHECK_MS, RunCancellations } from "./cancellations.ts";
import { compileDefinitions, verifySchemaVersion } from "./startup.ts";
import { openWakeups, type QueueWakeups, type WorkerWakeups } from "../claim/wakeups.ts";
import { type ResolvedTarget, resolveTarget, type SelectionInput } from "./target.ts";

/**
 * Where a worker is in its life: `created` → `starting` → `running` → (`draining` after
 * deprecation, or `stopping`) → `stopped`; `failed` when startup failed.
 *
 * @example
 * ```ts
 * import type { WorkerState } from "@pgflow/shared";
 *
 * const state: WorkerState = "running";
 * ```
 */
export type WorkerState =
  | "created"
  | "starting"
  | "running"
  | "draining"
  | "stopping"
  | "stopped"
  | "failed";

/**
 * One worker polling one queue. Create it with {@link createWorker}; several may run in one
 * process (tests, the local demo), each with its own pool unless given `sql`.
 *
 * @example
 * ```ts
 * import { createWorker, Flow } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const worker = createWorker(flow, { connectionString: "postgres://postgres@127.0.0.1/postgres" });
 * // await worker.start(); ... await worker.stop();
 * console.log(worker.queueName); // "demo"
 * ```
 */
export interface FlowWorker {
  /** The worker id (a UUID), as registered. */
  readonly id: string;
  /** The one queue polled. */
  readonly queueName: string;
  /** The function name recorded with the worker row. */
  readonly functionName: string;
  /** Where the worker is in its life. */
  readonly state: WorkerState;
  /** The exact (flow, step) pairs claimed; empty until started. */
  readonly supportSet: readonly SupportedPair[];
  /** Tasks running right now. */
  readonly inFlight: number;
  /** Resolves when the worker has stopped (after `stop()` or a drained deprecation). */
  readonly done: Promise<void>;
  /**
   * Compiles or verifies the definitions, derives the support set, registers the worker and
   * starts polling. Resolves once polling; rejects with a `WorkerStartupError` (nothing
   * registered, nothing polled). A `stop()` while it starts ends the startup at its next step
   * (no read is made; a row already registered is marked stopped): then it resolves once that
   * stop is done, with `state` `stopped`.
   */
  start(): Promise<void>;
  /**
   * Stops gracefully: stop polling → abort `shutdownSignal` → mark the worker row stopped → wait
   * for in-flight tasks to report → close the pool (only one the worker opened). No read starts
   * after it is called, whatever the state (a worker still starting stops before its first
   * read). With `unloading` (the platform's `beforeunload` reason) the process may end any
   * moment: a task that a read still under way claims is not started, and stalled recovery takes
   * it back. Bounded whatever happened before: in-flight tasks are awaited at most
   * `shutdownTimeoutMs`, each of its own database calls at most `queryTimeoutMs` (the read in
   * progress `maxPollSeconds` more), and every timer of the worker ends with it.
   */
  stop(options?: { readonly unloading?: string }): Promise<void>;
}

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
  #background: Promise<void>[] = [];
  #activity?: ActivityLog;
  #wakeups?: WorkerWakeups;
  #resolveDone!: () => void;
  /** The platform's `beforeunload` reason, once it came: no handler starts after it. */
  #unloading?: string;
  #leftAtUnload = 0;
  #cancellations?: RunCancellations;

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
      const unreachable = connectionProblem(error, this.#config.connectionString);
      const cannotStart = (reason: string) =>
        new WorkerStartupError(`worker for queue "${this.queueName}" could not start: ${reason}`);
      let failure: Error;
      if (error instanceof WorkerStartupError) failure = error;
      // An unreachable database is a setting to fix, which the message says: no stack.
      else if (unreachable !== undefined) failure = withoutStack(cannotStart(unreachable));
      else failure = cannotStart(pgMessage(error));
      failure = maskError(failure, this.#config.connectionString);
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
    let connection: ConnectionInfo;
    // Unknown for a pool the worker was given.
    let prepared: boolean | undefined;
    if (config.sql !== undefined) {
      this.#sql = config.sql;
      connection = await describeConnection(config.sql, config.connectionString, timeoutMs);
    } else {
      // Safe behind a transaction pooler: no request pipelined behind an unanswered Sync
      // (docs/connections.md), and prepared statements only where the server session stays ours.
      const pool = await openWorkerPool(
        config.connectionString!,
        config.maxPgConnections,
        config.preparedStatements,
        timeoutMs,
      );
      this.#sql = pool.sql;
      this.#ownsPool = true;
      connection = pool.connection;
      prepared = pool.prepared;
    }
    const sql = this.#sql;
    this.#log.info("database connection", { ...connection, preparedStatements: prepared });
    if (this.#stopRequested()) return;
    await verifySchemaVersion(sql, this.#log, timeoutMs);
    await compileDefinitions(sql, this.#target.definitions, this.#log, timeoutMs);
    if (this.#stopRequested()) return;
    const registry = new HandlerRegistry(this.#target.flows);
    const persisted = await queueSupportSet(
      sql,
      this.queueName,
      this.#target.flows.map((f: AnyFlow) => f.slug),
      timeoutMs,
    );
    const supported = persisted.filter(([flow, step]) => registry.has(flow, step));
    if (supported.length === 0) {
      throw new WorkerStartupError(
        `no step of flow(s) ${
          this.#target.flows.map((f) => `"${f.slug}"`).join(", ")
        } is routed to queue "${this.queueName}" in the database; nothing to poll`,
      );
    }
    this.#supportSet = Object.freeze(supported);
    const supabase = await prepareSupabaseClient(this.#env);
    if (this.#stopRequested()) return;
    // The support set is recorded with the worker so the coverage check can see what it serves.
    await registerWorker(sql, this, supported, timeoutMs);
    this.#registered = true;
    if (this.#stopRequested()) return;
    this.#wakeups = await openWakeups(
      sql,
      this.queueName,
      supported,
      config.wakeups,
      connection,
      this.#log,
      timeoutMs,
    );
    if (this.#stopRequested()) return;
    this.#state = "running";
    this.#log.info("worker started", {
      function: this.functionName,
      supported: supported.map(([flow, step]) => `${flow}.${step}`),
      wakeups: this.#wakeups.mode,
    });
    this.#launch(sql, registry, supabase);
  }

  #launch(sql: Sql, registry: HandlerRegistry, supabase: () => SupabaseClient): void {
    const config = this.#config;
    const flowInputs = new FlowInputCache(
      sql,
      undefined,
      config.queryTimeoutMs,
      config.maxPayloadBytes,
    );
    const resources: ContextResources = {
      env: this.#env,
      shutdownSignal: this.#shutdown.signal,
      sql,
      supabase,
      flowInputs,
      inputChecks: new RunInputChecks(flowInputs),
      extra: config.context,
    };
    // At most half the pool reports at once, so reads and claims always find a connection.
    const completer = new Completer({
      sql,
      maxInFlight: Math.max(1, Math.floor(config.maxPgConnections / 2)),
      timeoutMs: config.queryTimeoutMs,
      log: this.#log,
    });
    const activity = new ActivityLog(this.#log);
    this.#activity = activity;
    const execute = {
      queue: this.queueName,
      registry,
      resources,
      log: this.#log,
      completer,
      activity,
      logErrorMessages: config.logErrorMessages,
      maxPayloadBytes: config.maxPayloadBytes,
    };
    // The tasks in flight, by run: for ctx.signal, and for the log of what a bounded drain abandons.
    const cancellations = new RunCancellations(sql, this.#log, config.queryTimeoutMs);
    this.#cancellations = cancellations;
    const wakeups = this.#wakeups?.wakeups;
    completer.setReader(
      wakeups === undefined ? undefined : carryReleasedWork(
        wakeups,
        this.#pollStop.signal,
        feederPairs(this.#target.flows, this.#supportSet),
      ),
    );
    const loop = runPollLoop({
      sql,
      queue: this.queueName,
      workerId: this.id,
      supported: this.#supportSet,
      batchSize: config.batchSize,
      visibilityTimeout: config.visibilityTimeout,
      maxPollSeconds: config.maxPollSeconds,
      pollIntervalMs: config.pollIntervalMs,
      queryTimeoutMs: config.queryTimeoutMs,
      maxPayloadBytes: config.maxPayloadBytes,
      slots: this.#slots,
      log: this.#log,
      activity,
      completer,
      wakeups,
      signal: this.#pollStop.signal,
      execute: async (task, message, handlerDone) => {
        if (this.#unloading !== undefined) return this.#leaveAtUnload(handlerDone);
        const tracked = cancellations.track(task, this.#shutdown.signal);
        try {
          await executeTask(execute, task, message, handlerDone, tracked.signal);
        } finally {
          tracked.done();
        }
      },
    }).finally(() => completer.setReader(undefined));
    // Handlers of a run cancelled meanwhile are told through ctx.signal.
    const cancelChecks = every(
      CANCEL_CHECK_MS,
      this.#timersStop.signal,
      () => cancellations.check(),
    );
    const beating = every(config.heartbeatIntervalMs, this.#timersStop.signal, async () => {
      if (
        this.#state === "running" && await heartbeat(sql, this.id, this.#log, config.queryTimeoutMs)
      ) {
        this.#log.warn("worker deprecated; draining in-flight tasks", {});
        void this.#stop(false);
      }
    });
    const summary = every(config.logSummaryIntervalMs, this.#timersStop.signal, async () => {
      // Messages this worker cannot claim: the report names the live workers that serve them.
      const pairs = activity.pairsToDescribe();
      const servedBy = pairs.length === 0 ? undefined : await bounded(
        pairServers(sql, this.queueName, pairs),
        "read the workers that serve unclaimed pairs",
        config.queryTimeoutMs,
      ).catch(() => undefined);
      activity.flush(servedBy);
    });
    this.#background = [loop, beating, summary, cancelChecks];
    if (config.stalledRecoveryIntervalMs > 0) {
      const interval = config.stalledRecoveryIntervalMs;
      this.#background.push(
        every(interval, this.#timersStop.signal, async () => {
          await requeueStalledTasks(sql, this.#log, config.queryTimeoutMs);
        }, { firstDelayMs: Math.round(interval * Math.random()) }),
      );
    }
    if (config.scheduleTickIntervalMs > 0) {
      const ticker = new ScheduleTicker(sql, this.#log, config.queryTimeoutMs);
      this.#background.push(
        every(config.scheduleTickIntervalMs, this.#timersStop.signal, () => ticker.tick().then()),
      );
    }
  }

  stop(options?: { readonly unloading?: string }): Promise<void> {
    if (options?.unloading !== undefined && this.#unloading === undefined) {
      this.#unloading = options.unloading;
      this.#log.info("beforeunload: claiming stops", { reason: options.unloading });
    }
    return this.#stop(true);
  }

  /**
   * A task a read claimed after `beforeunload`: not started (the isolate may be ended before it
   * could report), left to stalled recovery, which takes it back after its timeout + 30 s.
   */
  #leaveAtUnload(handlerDone: () => void): Promise<void> {
    this.#leftAtUnload++;
    handlerDone();
    return Promise.resolve();
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
    const sql = this.#sql!;
    this.#log.info("shutdown: polling stopped", {});
    if (abortHandlers) {
      this.#log.info("shutdown: signalling handlers", {});
      this.#shutdown.abort();
    }
    // Every wait below has a bound, so a stop ends whatever state the database left the worker
    // in; one that runs out is logged, naming what was left behind.
    await this.#within(
      this.#background[0],
      config.maxPollSeconds * 1000 + config.queryTimeoutMs,
      "the read under way",
    );
    if (this.#leftAtUnload > 0) {
      this.#log.warn("tasks claimed as the platform unloaded were not started", {
        count: this.#leftAtUnload,
        action: "none: stalled recovery takes them back after their timeout + 30 s",
      });
    }
    // On the LISTEN connection, beside the rest (its calls have their own bound).
    const wakeupsClosed = this.#closeWakeups();
    await this.#markStopped(sql);
    await this.#drain();
    this.#timersStop.abort();
    await this.#within(
      Promise.allSettled([wakeupsClosed, ...this.#background.slice(1)]),
      config.queryTimeoutMs + END_MARGIN_MS,
      "the timers' last calls and the LISTEN connection",
    );
    // The last, partial interval: what happened since the previous summary is not lost.
    this.#activity?.flush();
    await this.#closePool();
    this.#state = "stopped";
    this.#log.info("shutdown: stopped", {});
    this.#resolveDone();
  }

  /**
   * The end of a startup that a stop cut short: nothing was read; what it had set up (the LISTEN,
   * the worker row, the pool) is undone in the order of a normal stop.
   */
  async #stopStartup(): Promise<void> {
    this.#state = "stopping";
    this.#log.info("shutdown: stopped while starting; nothing was read", {
      reason: this.#unloading,
    });
    const wakeupsClosed = this.#closeWakeups();
    if (this.#registered) await this.#markStopped(this.#sql!);
    await this.#within(wakeupsClosed, this.#config.queryTimeoutMs + END_MARGIN_MS, "the LISTEN");
    await this.#closePool();
    this.#state = "stopped";
    this.#log.info("shutdown: stopped", {});
    this.#resolveDone();
  }

  /**
   * Marks the worker row stopped. Done as soon as polling has really ended, before the drain: the
   * platform may kill the isolate any moment now, and a stopped row lets a replacement start
   * without waiting for the heartbeat to go stale.
   */
  async #markStopped(sql: Sql): Promise<void> {
    try {
      await retry(() => markWorkerStopped(sql, this.id, this.#config.queryTimeoutMs), {
        attempts: 3,
      });
    } catch (error) {
      this.#log.warn("could not mark the worker stopped", { error: (error as Error).message });
    }
  }

  /** Waits for `promise` at most `ms`; past that, logs what is left behind and goes on. */
  async #within(promise: Promise<unknown>, ms: number, what: string): Promise<void> {
    if (await settlesWithin(promise, ms)) return;
    this.#log.error("shutdown: going on without waiting longer", { for: what, timeoutMs: ms });
  }

  /**
   * Waits for in-flight tasks to finish and report, at most `shutdownTimeoutMs`; then names each
   * one it abandons (stalled recovery takes them back once they have run past their step's
   * timeout + 30 s), and the stop goes on: a handler that ignores `shutdownSignal`, or a report that cannot
   * get through, never holds a stopping worker for ever.
   */
  async #drain(): Promise<void> {
    const bound = this.#config.shutdownTimeoutMs;
    this.#log.info("shutdown: waiting for in-flight tasks", {
      inFlight: this.#slots.running,
      timeoutMs: bound,
    });
    if (await settlesWithin(this.#slots.drain(), bound)) return;
    const abandoned = this.#cancellations?.tasks() ?? [];
    this.#log.error("shutdown: in-flight tasks abandoned to stalled recovery", {
      timeoutMs: bound,
      abandoned: abandoned.length,
    });
    for (const task of abandoned) {
      this.#log.warn("shutdown: task abandoned", {
        runId: task.runId,
        flow: task.flowSlug,
        step: task.stepSlug,
        taskIndex: task.taskIndex,
        attempt: task.attempt,
      });
    }
  }

  async #closeWakeups(): Promise<void> {
    const wakeups = this.#wakeups;
    this.#wakeups = undefined;
    await wakeups?.close().catch((error) =>
      this.#log.warn("could not close the LISTEN connection", { error: (error as Error).message })
    );
  }

  async #closePool(): Promise<void> {
    if (this.#ownsPool && this.#sql !== undefined) {
      this.#ownsPool = false;
      // Connections that do not end within the timeout are destroyed: in postgres.js 3.4.7 a
      // connection whose backend was terminated mid-query never ends on its own, so after such a
      // fault every stop takes this long.
      await this.#within(
        this.#sql.end({ timeout: POOL_END_S }),
        POOL_END_S * 1000 + END_MARGIN_MS,
        "the pool",
      );
      this.#log.info("shutdown: pool closed", {});
    }
  }
}

/** Seconds the pool's connections get to end at a stop before they are destroyed. */
const POOL_END_S = 5;

/** What a stop allows, beyond the bound of the calls it waits for, for connections to end. */
const END_MARGIN_MS = 2_000;

/**
 * The wake-up `Completer.setReader` wants: while the poll loop waits for a notification, a
 * completion of one of `feeders` wakes it to read at once, carrying the completion, so the step it
 * releases on this queue is sent and claimed in the same call. Other completions go on their own:
 * an extra empty read would cost more.
 */
function carryReleasedWork(
  wakeups: QueueWakeups,
  polling: AbortSignal,
  feeders: ReadonlySet<string>,
): (tasks: readonly TaskAttempt[]) => boolean {
  return (tasks) => {
    if (polling.aborted || !wakeups.waiting) return false;
    if (!tasks.some((t) => feeders.has(`${t.flowSlug}\u001f${t.stepSlug}`))) return false;
    wakeups.wake();
    return true;
  };
}

/**
 * The dependencies of the steps a worker serves (as `flow\u001fstep`): completing one of them may
 * start a step the worker claims.
 */
function feederPairs(
  flows: readonly AnyFlow[],
  supported: readonly SupportedPair[],
): ReadonlySet<string> {
  const served = new Set(supported.map(([flow, step]) => `${flow}\u001f${step}`));
  const feeders = new Set<string>();
  for (const flow of flows) {
    for (const step of flow.steps()) {
      if (!served.has(`${flow.slug}\u001f${step.slug}`)) continue;
      for (const dep of step.dependencies) feeders.add(`${flow.slug}\u001f${dep}`);
    }
  }
  return feeders;
}
