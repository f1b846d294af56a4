import type { SupportedPair } from "../task/claim.ts";

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
