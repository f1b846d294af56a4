import { expectedSecret } from "../platform/auth.ts";
import { maskError } from "../platform/database_url.ts";
import { readWorkerEnv } from "../platform/env.ts";
import { onTerminationSignal } from "../platform/local.ts";
import { createLogger, markLogged, wasLogged } from "../platform/logger.ts";
import { edgeRuntime, onBeforeUnload } from "../platform/runtime.ts";
import { serveTrigger } from "../platform/trigger.ts";
import type { WorkerStart } from "../routing/selection.ts";
import type { EdgeWorkerConfig } from "./config.ts";
import type { SelectionInput } from "./target.ts";
import { instantiateWorker } from "./create_worker.ts";

/**
 * The process-wide worker entry point (one worker per Edge Function isolate).
 *
 * @example
 * ```ts
 * import { EdgeWorker, type EdgeWorkerApi } from "@pgflow/shared";
 *
 * const api: EdgeWorkerApi = EdgeWorker;
 * ```
 */
export interface EdgeWorkerApi {
  /**
   * Starts this process's worker. In the Supabase Edge runtime (or with
   * `EDGE_WORKER_TRIGGER=http`) it serves the HTTP trigger and starts the worker on the first
   * authorised request; in plain Deno it starts at once and resolves when the worker is
   * registered and polling, or rejects with the startup error. A second call is an error.
   */
  readonly start: WorkerStart<EdgeWorkerConfig, Promise<void>>;
  /** Stops the worker gracefully (stop polling → abort handlers → drain → close the pool). */
  stop(): Promise<void>;
}

let started = false;
let stopCurrent: (() => Promise<void>) | undefined;

/**
 * An unhandled rejection with an error already logged (a failed EdgeWorker start) ends the
 * process with exit code 1 without Deno printing it again. Any other rejection is left alone.
 */
function printOnce(): void {
  globalThis.addEventListener("unhandledrejection", (event) => {
    if (!wasLogged(event.reason)) return;
    event.preventDefault();
    Deno.exitCode = 1;
  });
}

/**
 * Runs flows in a Supabase Edge Function (or plain Deno). Use `createWorker` to run several
 * workers in one process.
 *
 * @example Two versions of a flow with grouped steps on one shared queue
 * ```ts
 * import { EdgeWorker, Flow, routeFlow } from "@pgflow/shared";
 *
 * const v1 = new Flow<{ threadId: string }>({ slug: "triage_v1" })
 *   .step({ slug: "classify" }, (input) => input.threadId.length);
 * const v2 = new Flow<{ threadId: string }>({ slug: "triage_v2" })
 *   .step({ slug: "classify" }, (input) => input.threadId)
 *   .step({ slug: "enrich", dependsOn: ["classify"] }, (deps) => deps.classify);
 *
 * await EdgeWorker.start([
 *   routeFlow(v1, { queues: { classify: "thread_processing" } }),
 *   routeFlow(v2, { queues: { classify: "thread_processing", enrich: "thread_processing" } }),
 * ], { queueName: "thread_processing", maxConcurrent: 4 });
 * ```
 */
export const EdgeWorker: EdgeWorkerApi = {
  start: (target, ...args) => {
    if (started) {
      return Promise.reject(
        new Error(
          "EdgeWorker.start() was already called in this process; one process runs one " +
            "EdgeWorker. Use createWorker() to run several workers side by side",
        ),
      );
    }
    started = true;
    const config = (args[0] ?? {}) as EdgeWorkerConfig & SelectionInput;
    const env = readWorkerEnv(config.env);
    const log = config.logger ?? createLogger({
      level: env.EDGE_WORKER_LOG_LEVEL === "debug" ? "debug" : "info",
    });
    // A startup error is printed once: as the JSON line the worker (or the catch below) wrote,
    // not again as an uncaught stack trace when the caller awaits start() at the top level.
    printOnce();
    let worker;
    try {
      // Built now, so a bad config or target fails at boot, not on the first request.
      worker = instantiateWorker(target, config);
    } catch (error) {
      // Config errors never hold the password; masked anyway, as the URL is not known here.
      const failure = maskError(error);
      log.error("worker failed to start", { error: failure.message });
      return Promise.reject(markLogged(failure));
    }
    const runtime = edgeRuntime();
    if (runtime === undefined && env.EDGE_WORKER_TRIGGER !== "http") {
      stopCurrent = () => worker.stop();
      onTerminationSignal(() => worker.stop());
      return worker.start();
    }
    const port = Number(env.PORT ?? 8000);
    const trigger = serveTrigger({
      serve: (handler) => {
        if (runtime !== undefined) Deno.serve(handler);
        else {
          Deno.serve({
            port,
            hostname: "127.0.0.1",
            onListen: ({ port }) => log.info("trigger listening", { port }),
          }, handler);
        }
      },
      waitUntil: runtime === undefined ? undefined : (promise) => runtime.waitUntil(promise),
      onUnload: (listener) => onBeforeUnload(listener),
      secret: expectedSecret(env),
      log,
      create: (functionName) =>
        instantiateWorker(target, { ...config, functionName: config.functionName ?? functionName }),
    });
    stopCurrent = () => trigger.stop();
    if (runtime === undefined) onTerminationSignal(() => trigger.stop());
    return Promise.resolve();
  },
  stop: async () => {
    if (stopCurrent === undefined) {
      throw new Error("EdgeWorker.stop() was called before EdgeWorker.start()");
    }
    await stopCurrent();
  },
};
