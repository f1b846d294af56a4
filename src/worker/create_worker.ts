import type { WorkerStartArgs, WorkerTarget } from "../routing/selection.ts";
import type { EdgeWorkerConfig } from "./config.ts";
import type { FlowWorker } from "./flow_worker.ts";
import type { SelectionInput } from "./target.ts";
import { Worker } from "./worker.ts";

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
