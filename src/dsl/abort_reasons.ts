/**
 * The reasons a handler's `ctx.signal` carries when the engine, not the handler, ends an attempt:
 * its step's timeout passed ({@link StepTimedOut}), or its worker is shutting down
 * ({@link WorkerShutdown}). A handler tells them apart by `ctx.signal.reason`.
 *
 * @module
 */

/**
 * `ctx.signal`'s reason when a task ran past its step's `timeout`: the attempt fails with this
 * error (it counts toward `maxAttempts`) and is retried with the flow's backoff while attempts
 * remain.
 *
 * @example
 * ```ts
 * import { Flow, StepTimedOut } from "@pgflow/shared";
 *
 * new Flow<{ url: string }>({ slug: "fetch_page", timeout: 10 })
 *   .step({ slug: "get" }, async (input, ctx) => {
 *     try {
 *       return await (await fetch(input.url, { signal: ctx.signal })).text();
 *     } catch (error) {
 *       if (ctx.signal.reason instanceof StepTimedOut) console.log(ctx.signal.reason.message);
 *       throw error;
 *     }
 *   });
 * ```
 */
export class StepTimedOut extends Error {
  /** The step that timed out, as `flow.step`. */
  readonly step: string;
  /** Its effective timeout, in seconds. */
  readonly timeoutSeconds: number;
  /** The attempt that ran past it (1-based). */
  readonly attempt: number;

  /** Names the step, its timeout and the attempt in the message. */
  constructor(step: string, timeoutSeconds: number, attempt: number) {
    super(`step ${step} timed out: attempt ${attempt} ran past its timeout of ${timeoutSeconds} s`);
    this.name = "StepTimedOut";
    this.step = step;
    this.timeoutSeconds = timeoutSeconds;
    this.attempt = attempt;
  }
}

/**
 * `ctx.signal`'s (and `ctx.shutdownSignal`'s) reason when the worker running the task stops
 * (`stop()`, SIGINT/SIGTERM, an Edge isolate unloading). An attempt that ends with an error after
 * it is `interrupted`: it does not count toward `maxAttempts`, and the task is queued again at
 * once for another worker.
 *
 * @example
 * ```ts
 * import { Flow, WorkerShutdown } from "@pgflow/shared";
 *
 * new Flow<{ ids: string[] }>({ slug: "batch" })
 *   .step({ slug: "each" }, async (input, ctx) => {
 *     for (const id of input.ids) {
 *       // Stops between items: the task is retried from the start on another worker.
 *       if (ctx.signal.reason instanceof WorkerShutdown) throw ctx.signal.reason;
 *       await Promise.resolve(id);
 *     }
 *     return input.ids.length;
 *   });
 * ```
 */
export class WorkerShutdown extends Error {
  /** Names why the worker stops. */
  constructor(why: string = "stop() was called") {
    super(`the worker is shutting down (${why}); the task will be retried by another worker`);
    this.name = "WorkerShutdown";
  }
}
