import type { AnyFlow, StepSlug } from "../dsl/extract.ts";
import { RoutingError } from "./errors.ts";
import { privateQueueName } from "./private_queue.ts";
import type { StepQueuedFlow } from "./routed.ts";

/**
 * Gives every step of a flow its own generated **private queue**, so a busy step cannot starve
 * the others and each step can have its own worker pool (`{ stepSlug }` in the worker config).
 * Names follow {@link privateQueueName}: `lower(flow__step)`, or `lower(flow__<index>)` when that
 * would exceed 47 characters; a flow whose names cannot fit throws a {@link RoutingError}.
 *
 * @param flow the flow; it must have at least one step
 * @returns a frozen {@link StepQueuedFlow} that keeps the flow's types
 * @example
 * ```ts
 * import { Flow, withStepQueues } from "@pgflow/shared";
 *
 * const flow = new Flow<{ url: string }>({ slug: "scrape" })
 *   .step({ slug: "fetch" }, (input) => input.url)
 *   .step({ slug: "parse", dependsOn: ["fetch"] }, (deps) => deps.fetch.length);
 * const stepQueued = withStepQueues(flow);
 * console.log(stepQueued.queues); // { fetch: "scrape__fetch", parse: "scrape__parse" }
 * ```
 */
export function withStepQueues<F extends AnyFlow>(flow: F): StepQueuedFlow<F> {
  if (flow === null || typeof flow !== "object" || !Array.isArray(flow.stepOrder)) {
    throw new RoutingError(`withStepQueues() needs a Flow as its argument`);
  }
  if (flow.stepOrder.length === 0) {
    throw new RoutingError(
      `withStepQueues(flow "${flow.slug}"): the flow has no steps; add steps first`,
    );
  }
  const queues: Record<string, string> = {};
  (flow.stepOrder as readonly string[]).forEach((step, index) => {
    queues[step] = privateQueueName(flow.slug, step, index);
  });
  return Object.freeze({
    mode: "step",
    slug: flow.slug,
    flow,
    queues: Object.freeze(queues) as { readonly [K in StepSlug<F>]: string },
  });
}
