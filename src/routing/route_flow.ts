import type { AnyFlow, StepSlug } from "../dsl/extract.ts";
import { RoutingError } from "./errors.ts";
import { validateQueueName } from "./queue_name.ts";
import type { RoutedFlow } from "./routed.ts";

/** Keys of `Q` that are not steps must have type `never`, so each one is reported by name. */
export type NoUnknownSteps<Q, K extends PropertyKey> = {
  readonly [P in Exclude<keyof Q, K>]: never;
};

/**
 * The route map argument of {@link routeFlow}: one queue per step, nothing else.
 *
 * @example
 * ```ts
 * import { Flow, type RouteMap } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const routes: RouteMap<typeof flow> = { queues: { a: "work" } };
 * ```
 */
export interface RouteMap<F extends AnyFlow> {
  /** step slug → shared queue name; every step exactly once. */
  readonly queues: { readonly [K in StepSlug<F>]: string };
}

/**
 * Routes every step of a flow to an explicit **shared queue**. Several steps, several flows and
 * several versions of a flow may use one queue; a worker then polls that one queue and runs the
 * (flow, step) pairs it has handlers for.
 *
 * The map must name every step exactly once: a missing or unknown step is a compile error and a
 * run-time {@link RoutingError} naming the keys. Queue names are checked at once (lowercase
 * `[a-z][a-z0-9_]*`, no `__`, at most 47 characters). The result keeps the flow and every one of
 * its types, plus the exact queue literals, so worker configs autocomplete `queueName`.
 *
 * @param flow the flow to route
 * @param routes `{ queues: { [stepSlug]: queueName } }`
 * @returns a frozen {@link RoutedFlow}
 *
 * @example Grouped steps: classification and enrichment share one pool, Slack has its own
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared";
 *
 * const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}` }))
 *   .step({ slug: "enrich", dependsOn: ["classify"] }, (deps) => ({ text: deps.classify.label }))
 *   .step({ slug: "deliverSlack", dependsOn: ["enrich"] }, (deps) => ({ sent: deps.enrich.text }));
 *
 * const routed = routeFlow(triage, {
 *   queues: {
 *     classify: "thread_processing",
 *     enrich: "thread_processing",
 *     deliverSlack: "slack_delivery",
 *   },
 * });
 * ```
 *
 * @example Several flows and versions on one queue
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared";
 *
 * const v1 = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
 *   .step({ slug: "classify" }, (input) => input.threadId.length);
 * const v2 = new Flow<{ threadId: string; locale: string }>({ slug: "thread_triage_v2" })
 *   .step({ slug: "classify" }, (input) => `${input.locale}:${input.threadId}`)
 *   .step({ slug: "notify", dependsOn: ["classify"] }, (deps) => ({ text: deps.classify }));
 * const digest = new Flow<{ day: string }>({ slug: "daily_digest" })
 *   .step({ slug: "collect" }, (input) => [input.day]);
 *
 * // One worker polling "thread_processing" runs v1.classify, v2.classify and digest.collect
 * // (old runs of v1 drain while v2 takes new ones); v2.notify has its own pool.
 * const routes = [
 *   routeFlow(v1, { queues: { classify: "thread_processing" } }),
 *   routeFlow(v2, { queues: { classify: "thread_processing", notify: "slack_delivery" } }),
 *   routeFlow(digest, { queues: { collect: "thread_processing" } }),
 * ] as const;
 * ```
 */
export function routeFlow<
  F extends AnyFlow,
  const Q extends { readonly [K in StepSlug<F>]: string },
>(
  flow: F,
  routes: { readonly queues: Q & NoUnknownSteps<Q, StepSlug<F>> },
): RoutedFlow<F, Q> {
  const queues = checkRouteMap(flow, routes);
  return Object.freeze({ mode: "routed", slug: flow.slug, flow, queues: queues as Readonly<Q> });
}

/** Run-time check of a route map; returns a frozen copy ordered like the steps. */
function checkRouteMap(flow: AnyFlow, routes: unknown): Readonly<Record<string, string>> {
  const where = `routeFlow(flow "${flow?.slug}")`;
  if (flow === null || typeof flow !== "object" || !Array.isArray(flow.stepOrder)) {
    throw new RoutingError(`routeFlow() needs a Flow as its first argument`);
  }
  const queues = (routes as { queues?: unknown } | null)?.queues;
  if (queues === null || typeof queues !== "object" || Array.isArray(queues)) {
    throw new RoutingError(
      `${where} needs { queues: { <step>: "<queue>" } }, e.g. { queues: { ${
        flow.stepOrder.map((step: string) => `${step}: "my_queue"`).join(", ")
      } } }`,
    );
  }
  if (flow.stepOrder.length === 0) {
    throw new RoutingError(`${where}: the flow has no steps; add steps before routing it`);
  }
  const steps = new Set<string>(flow.stepOrder);
  const given = Object.keys(queues);
  const unknown = given.filter((key) => !steps.has(key));
  const missing = flow.stepOrder.filter((step: string) => !Object.hasOwn(queues, step));
  if (unknown.length > 0 || missing.length > 0) {
    const problems: string[] = [];
    if (missing.length > 0) problems.push(`missing step(s) ${quoteList(missing)}`);
    if (unknown.length > 0) problems.push(`unknown step(s) ${quoteList(unknown)}`);
    throw new RoutingError(
      `${where}: the route map must name every step exactly once: ${problems.join("; ")}. ` +
        `The steps are ${quoteList(flow.stepOrder)}`,
    );
  }
  const ordered: Record<string, string> = {};
  for (const step of flow.stepOrder as readonly string[]) {
    const queue = (queues as Record<string, unknown>)[step];
    validateQueueName(queue as string, `${where}: queue of step "${step}"`);
    ordered[step] = queue as string;
  }
  return Object.freeze(ordered);
}

function quoteList(items: readonly string[]): string {
  return items.map((item) => `"${item}"`).join(", ");
}
