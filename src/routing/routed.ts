import type { AnyFlow, StepSlug } from "../dsl/extract.ts";

/**
 * A flow whose steps are routed to explicit shared queues by `routeFlow`. It keeps the flow
 * (with all its types) in `flow`, and the exact route map in `queues`: `Q` holds each step's
 * queue as a literal, so `Q[keyof Q]` is the union of queue names a worker may poll.
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type RoutedFlow } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const routed: RoutedFlow<typeof flow, { a: "work" }> = routeFlow(flow, { queues: { a: "work" } });
 * ```
 */
export interface RoutedFlow<
  F extends AnyFlow = AnyFlow,
  Q extends { readonly [step: string]: string } = { readonly [step: string]: string },
> {
  /** Always `"routed"`. */
  readonly mode: "routed";
  /** The concrete flow slug (same as `flow.slug`). */
  readonly slug: string;
  /** The flow, unchanged. */
  readonly flow: F;
  /** step slug → shared queue name, in definition order (frozen). */
  readonly queues: Readonly<Q>;
}

/**
 * A flow whose every step has its own generated private queue (`withStepQueues`).
 *
 * @example
 * ```ts
 * import { Flow, withStepQueues, type StepQueuedFlow } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const private_: StepQueuedFlow<typeof flow> = withStepQueues(flow);
 * console.log(private_.queues.a); // "demo__a"
 * ```
 */
export interface StepQueuedFlow<F extends AnyFlow = AnyFlow> {
  /** Always `"step"`. */
  readonly mode: "step";
  /** The concrete flow slug (same as `flow.slug`). */
  readonly slug: string;
  /** The flow, unchanged. */
  readonly flow: F;
  /** step slug → generated private queue name, in definition order (frozen). */
  readonly queues: { readonly [K in StepSlug<F>]: string };
}
