import type { AnyFlow } from "../dsl/extract.ts";
import type { RuntimeOptions, StepRuntimeOptions, WhenMode } from "../dsl/options.ts";
import type { FlowControlOptions } from "../dsl/flow_control.ts";
import type { PatternSlot } from "../dsl/types.ts";
import type { ChildFlowDefinition } from "../dsl/child_flow.ts";
import type { WaitDefinition } from "../dsl/wait.ts";
import { flowQueueName } from "../routing/flow_queue.ts";
import type { RoutedFlow, StepQueuedFlow } from "../routing/routed.ts";

/**
 * One step of a {@link FlowShape}: what SQL compares to decide whether a stored definition is
 * the same DAG. Options and routes are deliberately not part of it.
 *
 * @example
 * ```ts
 * import type { StepShape } from "@pgflow/shared/tools";
 *
 * const step: StepShape = {
 *   slug: "classify",
 *   index: 0,
 *   stepType: "single",
 *   dependencies: [],
 *   whenUnmet: "skip",
 *   whenExhausted: "fail",
 *   requiredInputPattern: { defined: false },
 *   forbiddenInputPattern: { defined: false },
 * };
 * ```
 */
export interface StepShape {
  /** The step slug. */
  readonly slug: string;
  /** 0-based definition order. */
  readonly index: number;
  /** `map` for `.map()`, `single` for `.step()` and `.array()`. */
  readonly stepType: "single" | "map";
  /** Dependency slugs, sorted by code unit so the order they were written in never matters. */
  readonly dependencies: readonly string[];
  /** Resolved `whenUnmet` (SQL default `skip`). */
  readonly whenUnmet: WhenMode;
  /** Resolved `whenExhausted` (SQL default `fail`). */
  readonly whenExhausted: WhenMode;
  /** The `if` pattern, keys sorted; `{ defined: false }` when absent. */
  readonly requiredInputPattern: PatternSlot;
  /** The `ifNot` pattern, keys sorted; `{ defined: false }` when absent. */
  readonly forbiddenInputPattern: PatternSlot;
  /** A child-flow step's flow and input mapping; absent for a step with a handler. */
  readonly child?: ChildFlowDefinition;
  /** A waiting step's event or sleep (`.waitForEvent()`, `.sleep()`); absent for a task step. */
  readonly wait?: WaitDefinition;
}

/**
 * The DAG of a flow as the startup compiler sends it: steps in definition order.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { extractFlowShape } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * const shape = extractFlowShape(flow);
 * console.log(JSON.stringify(shape));
 * ```
 */
export interface FlowShape {
  /** Steps in definition order. */
  readonly steps: readonly StepShape[];
}

/**
 * Runtime options carried next to the shape (SQL stores them but never compares them, so they
 * stay tunable): the flow's and each step's, only those that were set.
 *
 * @example
 * ```ts
 * import type { FlowOptionsPlan } from "@pgflow/shared/tools";
 *
 * const plan: FlowOptionsPlan = { flow: { maxAttempts: 3 }, steps: { a: { timeout: 10 } } };
 * ```
 */
export interface FlowOptionsPlan {
  /** Flow-wide options (flow control's are each step's default). */
  readonly flow: RuntimeOptions & FlowControlOptions;
  /** step slug → step options, in definition order. */
  readonly steps: { readonly [step: string]: StepRuntimeOptions & FlowControlOptions };
}

/**
 * How a flow's steps map to queues: the queue mode plus step slug → queue name, in definition
 * order. Separate from the shape because routes are deployment metadata.
 *
 * @example
 * ```ts
 * import type { RoutePlan } from "@pgflow/shared/tools";
 *
 * const plan: RoutePlan = { mode: "flow", queues: { a: "demo" } };
 * ```
 */
export interface RoutePlan {
  /** `flow` (plain), `step` (`withStepQueues`) or `routed` (`routeFlow`). */
  readonly mode: "flow" | "step" | "routed";
  /** step slug → queue name. */
  readonly queues: { readonly [step: string]: string };
}

/**
 * Anything the compiler accepts: a plain, step-queued or routed flow.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import type { CompilableFlow } from "@pgflow/shared/tools";
 *
 * const target: CompilableFlow = new Flow<{ id: string }>({ slug: "demo" });
 * ```
 */
export type CompilableFlow = AnyFlow | StepQueuedFlow | RoutedFlow;

/**
 * The alias a flow is compiled with (`FlowOptions.alias`), or `null` for none.
 *
 * @param target a plain, step-queued or routed flow
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { extractAlias } from "@pgflow/shared/tools";
 *
 * extractAlias(new Flow({ slug: "triage_v2", alias: "triage" })); // "triage"
 * ```
 */
export function extractAlias(target: CompilableFlow): string | null {
  return unwrap(target).alias ?? null;
}

function unwrap(target: CompilableFlow): AnyFlow {
  return "mode" in target && (target.mode === "routed" || target.mode === "step")
    ? target.flow
    : target as AnyFlow;
}

/**
 * The deterministic JSON shape of a flow: the same definition always yields the same value (and
 * the same `JSON.stringify` text), whatever order dependencies or pattern keys were written in.
 *
 * @param target a plain, step-queued or routed flow
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { extractFlowShape } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<string[]>({ slug: "lengths" })
 *   .map({ slug: "length" }, (item) => item.length)
 *   .step({ slug: "total", dependsOn: ["length"] }, (d) => d.length.length);
 * console.log(extractFlowShape(flow).steps.map((s) => s.stepType)); // ["map", "single"]
 * ```
 */
export function extractFlowShape(target: CompilableFlow): FlowShape {
  const flow = unwrap(target);
  const steps = flow.steps().map((step): StepShape => ({
    slug: step.slug,
    index: step.index,
    stepType: step.kind === "map" ? "map" : "single",
    dependencies: [...step.dependencies].sort(compareCodeUnits),
    whenUnmet: step.whenUnmet ?? "skip",
    whenExhausted: step.whenExhausted ?? "fail",
    requiredInputPattern: step.requiredInputPattern,
    forbiddenInputPattern: step.forbiddenInputPattern,
    ...(step.child === undefined ? {} : { child: step.child }),
    ...(step.wait === undefined ? {} : { wait: step.wait }),
  }));
  return { steps };
}

/**
 * The runtime options of a flow and its steps, carried beside the shape.
 *
 * @param target a plain, step-queued or routed flow
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { extractFlowOptions } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo", timeout: 30 })
 *   .step({ slug: "a", maxAttempts: 1 }, (i) => i.id);
 * console.log(extractFlowOptions(flow)); // { flow: { timeout: 30 }, steps: { a: { maxAttempts: 1 } } }
 * ```
 */
export function extractFlowOptions(target: CompilableFlow): FlowOptionsPlan {
  const flow = unwrap(target);
  const steps: Record<string, StepRuntimeOptions & FlowControlOptions> = {};
  for (const step of flow.steps()) steps[step.slug] = { ...step.options, ...step.flowControl };
  return { flow: { ...flow.options, ...flow.flowControl }, steps };
}

/**
 * The route plan of a flow. A plain flow is in `flow` mode: every step goes to the queue named
 * `lower(flow_slug)` (which must be a valid queue name, so at most 47 characters). A step-queued
 * flow gives its private queues, a routed flow its shared queues.
 *
 * @param target a plain, step-queued or routed flow
 * @example
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared";
 * import { extractRoutePlan } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<{ id: string }>({ slug: "Demo" }).step({ slug: "a" }, (i) => i.id);
 * extractRoutePlan(flow); // { mode: "flow", queues: { a: "demo" } }
 * extractRoutePlan(routeFlow(flow, { queues: { a: "work" } })); // { mode: "routed", ... }
 * ```
 */
export function extractRoutePlan(target: CompilableFlow): RoutePlan {
  if ("mode" in target && (target.mode === "routed" || target.mode === "step")) {
    const queues: Record<string, string> = {};
    for (const step of target.flow.stepOrder as readonly string[]) {
      queues[step] = (target.queues as Record<string, string>)[step];
    }
    return { mode: target.mode, queues };
  }
  const flow = target as AnyFlow;
  const queue = flowQueueName(flow.slug);
  const queues: Record<string, string> = {};
  for (const step of flow.stepOrder as readonly string[]) queues[step] = queue;
  return { mode: "flow", queues };
}

/** Plain code-unit order: locale-independent, the same as SQL `COLLATE "C"`. */
function compareCodeUnits(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
