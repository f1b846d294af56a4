import type { Env, HandlerContext } from "./context.ts";
import type { AnySteps } from "./types.ts";
import type { DepsTable, FlowTypes } from "./builder_types.ts";
import type { Flow } from "./flow.ts";

/**
 * Any flow, whatever its types. Use it as a constraint: `<F extends AnyFlow>(flow: F)`.
 *
 * @example
 * ```ts
 * import type { AnyFlow } from "@pgflow/shared";
 *
 * function slugOf(flow: AnyFlow): string {
 *   return flow.slug;
 * }
 * ```
 */
// deno-lint-ignore no-explicit-any
export type AnyFlow = Flow<any, any, any, any, any, any>;

/**
 * Something that wraps a flow (a routed or step-queued flow) or a flow itself; the helper types
 * below accept all of them, so routing never loses a flow's types.
 *
 * @example
 * ```ts
 * import type { FlowCarrier } from "@pgflow/shared";
 *
 * const slug = (carrier: FlowCarrier) => carrier;
 * ```
 */
export type FlowCarrier = AnyFlow | { readonly flow: AnyFlow };

/**
 * The `Flow` inside a carrier (itself for a plain flow).
 *
 * @example
 * ```ts
 * import { Flow, routeFlow, type UnwrapFlow } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const routed = routeFlow(flow, { queues: { a: "work" } });
 * type Same = UnwrapFlow<typeof routed>; // typeof flow
 * ```
 */
export type UnwrapFlow<T> = T extends AnyFlow ? T
  : T extends { readonly flow: infer F extends AnyFlow } ? F
  : never;

/** The {@link FlowTypes} of a carrier. */
export type TypesOf<T> = NonNullable<UnwrapFlow<T>["~types"]>;

/**
 * The run input type of a flow (or routed flow).
 *
 * @example
 * ```ts
 * import { Flow, type ExtractFlowInput } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" });
 * type In = ExtractFlowInput<typeof flow>; // { id: string }
 * ```
 */
export type ExtractFlowInput<T extends FlowCarrier> = TypesOf<T>["input"];

/**
 * The custom context type declared on a flow (its second type parameter).
 *
 * @example
 * ```ts
 * import { Flow, type ExtractFlowContext } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }, { redis: string }>({ slug: "demo" });
 * type Ctx = ExtractFlowContext<typeof flow>; // { redis: string }
 * ```
 */
export type ExtractFlowContext<T extends FlowCarrier> = TypesOf<T>["context"];

/**
 * The environment type of a flow.
 *
 * @example
 * ```ts
 * import { Flow, type Env, type ExtractFlowEnv } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }, Record<never, never>, Env & { KEY: string }>({ slug: "demo" });
 * type E = ExtractFlowEnv<typeof flow>; // Env & { KEY: string }
 * ```
 */
export type ExtractFlowEnv<T extends FlowCarrier> = TypesOf<T>["env"] extends infer E extends Env
  ? E
  : Env;

/**
 * The full context a handler of this flow receives.
 *
 * @example
 * ```ts
 * import { Flow, type ExtractHandlerContext } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }, { redis: string }>({ slug: "demo" });
 * type Ctx = ExtractHandlerContext<typeof flow>; // StepContext<{ id: string }> & { redis: string }
 * ```
 */
export type ExtractHandlerContext<T extends FlowCarrier> = HandlerContext<
  ExtractFlowInput<T>,
  ExtractFlowContext<T>,
  ExtractFlowEnv<T>,
  TypesOf<T>["platform"]
>;

/**
 * The step table of a flow: slug → `StepMeta`.
 *
 * @example
 * ```ts
 * import { Flow, type ExtractFlowStepsMeta } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type Meta = ExtractFlowStepsMeta<typeof flow>["a"]; // StepMeta<string, false>
 * ```
 */
export type ExtractFlowStepsMeta<T extends FlowCarrier> = TypesOf<T>["steps"] extends
  infer S extends AnySteps ? S
  : never;

/**
 * The step slugs of a flow, as a union of literals.
 *
 * @example
 * ```ts
 * import { Flow, type StepSlug } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id)
 *   .step({ slug: "b" }, (i) => i.id);
 * type Slugs = StepSlug<typeof flow>; // "a" | "b"
 * ```
 */
export type StepSlug<T extends FlowCarrier> = keyof ExtractFlowStepsMeta<T> & string;

/**
 * slug → output type for every step of a flow.
 *
 * @example
 * ```ts
 * import { Flow, type ExtractFlowSteps } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type Outputs = ExtractFlowSteps<typeof flow>; // { a: string }
 * ```
 */
export type ExtractFlowSteps<T extends FlowCarrier> = {
  [K in StepSlug<T>]: ExtractFlowStepsMeta<T>[K]["output"];
};

/**
 * The output type of one step.
 *
 * @example
 * ```ts
 * import { Flow, type StepOutput } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type A = StepOutput<typeof flow, "a">; // string
 * ```
 */
export type StepOutput<T extends FlowCarrier, S extends StepSlug<T>> = ExtractFlowStepsMeta<
  T
>[S]["output"];

/**
 * slug → union of dependency slugs (never for root steps).
 *
 * @example
 * ```ts
 * import { Flow, type ExtractFlowDeps } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id)
 *   .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
 * type Deps = ExtractFlowDeps<typeof flow>; // { a: never; b: "a" }
 * ```
 */
export type ExtractFlowDeps<T extends FlowCarrier> = TypesOf<T>["deps"] extends
  infer D extends DepsTable ? { [K in keyof D]: D[K] }
  : never;

/**
 * The first argument a step's handler receives: the run input for a root step, the dependency
 * object otherwise (map steps: see their `.map()` handler's item).
 *
 * @example
 * ```ts
 * import { Flow, type StepInput } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id)
 *   .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
 * type B = StepInput<typeof flow, "b">; // { a: string }
 * ```
 */
export type StepInput<T extends FlowCarrier, S extends StepSlug<T>> = [
  ExtractFlowDeps<T>[S],
] extends [never] ? ExtractFlowInput<T>
  : import("./types.ts").DepsInput<ExtractFlowStepsMeta<T>, ExtractFlowDeps<T>[S]>;

/** Re-exported so the extraction helpers stand on their own. */
export type { FlowTypes };
