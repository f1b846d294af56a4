import type { AnyFlow, StepSlug } from "../dsl/extract.ts";
import type { RoutedFlow, StepQueuedFlow } from "./routed.ts";

/**
 * What a worker can be started with: a plain flow (its own flow queue), a step-queued flow (one
 * private step queue), or one or more routed flows (one shared queue).
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type WorkerTarget } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const target: WorkerTarget = [routeFlow(flow, { queues: { a: "work" } })];
 * ```
 */
export type WorkerTarget =
  | AnyFlow
  | StepQueuedFlow
  | RoutedFlow
  | readonly RoutedFlow[];

/**
 * The union of queue names a routed flow, or an array of routed flows, routes to. Never for
 * plain and step-queued flows (they take no `queueName`).
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type QueueNameOf } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id)
 *   .step({ slug: "b" }, (i) => i.id);
 * const routed = routeFlow(flow, { queues: { a: "work", b: "slack_delivery" } });
 * type Names = QueueNameOf<typeof routed>; // "work" | "slack_delivery"
 * ```
 */
export type QueueNameOf<T> = T extends readonly (infer R)[] ? QueueNameOf<R>
  : T extends RoutedFlow<AnyFlow, infer Q> ? Q[keyof Q] & string
  : never;

/**
 * The step slugs a worker of a step-queued flow may select. Never for other targets.
 *
 * @example
 * ```ts
 * import { Flow, withStepQueues, type StepSlugOf } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type Slugs = StepSlugOf<ReturnType<typeof withStepQueues<typeof flow>>>; // "a"
 * ```
 */
export type StepSlugOf<T> = T extends StepQueuedFlow<infer F> ? StepSlug<F> : never;

/**
 * Which queue a worker polls, per target: routed flows need `queueName` (one of their route
 * queues), a step-queued flow needs `stepSlug` (one of its steps), and a plain flow takes
 * neither because it always polls its own flow queue.
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type WorkerSelection } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const routed = routeFlow(flow, { queues: { a: "work" } });
 * const selection: WorkerSelection<typeof routed> = { queueName: "work" };
 * ```
 */
export type WorkerSelection<T> = T extends readonly RoutedFlow[] | RoutedFlow
  ? { readonly queueName: QueueNameOf<T>; readonly stepSlug?: never }
  : T extends StepQueuedFlow ? { readonly stepSlug: StepSlugOf<T>; readonly queueName?: never }
  : T extends AnyFlow ? { readonly queueName?: never; readonly stepSlug?: never }
  : never;

/**
 * A worker config for target `T`: the worker's own options (`TConfig`, without any
 * `queueName`/`stepSlug` of its own) plus the {@link WorkerSelection} for `T`.
 *
 * @example
 * ```ts
 * import { Flow, withStepQueues, type WorkerConfigFor } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const stepQueued = withStepQueues(flow);
 * const config: WorkerConfigFor<typeof stepQueued, { maxConcurrent?: number }> = {
 *   stepSlug: "a",
 *   maxConcurrent: 4,
 * };
 * ```
 */
export type WorkerConfigFor<T, TConfig extends object> =
  & Omit<TConfig, "queueName" | "stepSlug">
  & WorkerSelection<T>;

/**
 * The config argument(s) of a worker start function: optional for a plain flow, required
 * (because it must select a queue or step) for routed and step-queued targets.
 *
 * @example
 * ```ts
 * import { Flow, type WorkerStartArgs } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const args: WorkerStartArgs<typeof flow, { maxConcurrent?: number }> = [];
 * ```
 */
export type WorkerStartArgs<T, TConfig extends object> = T extends AnyFlow
  ? [config?: WorkerConfigFor<T, TConfig>]
  : [config: WorkerConfigFor<T, TConfig>];

/**
 * The signature of a worker start function, for the worker to declare itself with: the `const`
 * type parameter keeps the target's queue literals, so `queueName` and `stepSlug` autocomplete
 * and reject anything outside the routes.
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type WorkerStart } from "@pgflow/shared";
 *
 * const start: WorkerStart<{ maxConcurrent?: number }, Promise<void>> = async () => {};
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * await start([routeFlow(flow, { queues: { a: "work" } })], { queueName: "work" });
 * ```
 */
export type WorkerStart<TConfig extends object, TResult> = <const T extends WorkerTarget>(
  target: T,
  ...config: WorkerStartArgs<T, TConfig>
) => TResult;
