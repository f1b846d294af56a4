/**
 * The types of a run of a flow, from its definition: its input and its output. The DSL types a
 * child-flow step's output with them; the client types runs with them.
 *
 * @module
 */
import type {
  ExtractFlowDeps,
  ExtractFlowInput,
  ExtractFlowStepsMeta,
  FlowCarrier,
  StepSlug,
} from "./extract.ts";
import type { Json } from "../util/json.ts";
import type { Simplify } from "./types.ts";

/**
 * Whether `F` is a flow type (`true`) or `never`, which is what a slug given without a type
 * parameter leaves: then input and output are `Json`.
 *
 * @example
 * ```ts
 * import type { IsTypedFlow } from "@pgflow/shared";
 *
 * type Untyped = IsTypedFlow<never>; // false
 * ```
 */
export type IsTypedFlow<F> = [F] extends [never] ? false : true;

/**
 * The input type of a run of `F`; `Json` when `F` is not given.
 *
 * @example
 * ```ts
 * import { Flow, type FlowInputOf } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type In = FlowInputOf<typeof flow>; // { id: string }
 * ```
 */
export type FlowInputOf<F extends FlowCarrier> = IsTypedFlow<F> extends true ? ExtractFlowInput<F>
  : Json;

/**
 * Slugs of the steps nothing depends on: their outputs make up the run's output.
 *
 * @example
 * ```ts
 * import { Flow, type LeafSlug } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id)
 *   .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
 * type Leaves = LeafSlug<typeof flow>; // "b"
 * ```
 */
export type LeafSlug<F extends FlowCarrier> = Exclude<StepSlug<F>, ExtractFlowDeps<F>[StepSlug<F>]>;

/**
 * The output of a completed run of `F`: one key per leaf step (a step no other step depends on)
 * holding that step's output. A leaf that may be skipped (`whenUnmet: 'skip'`) is optional: a
 * skipped leaf is absent. `Json` when `F` is not given.
 *
 * A leaf skipped by a `'skip-cascade'` above it is absent too; the DSL does not track cascades in
 * its types, so such keys are typed as present. Check for them when a flow uses `'skip-cascade'`.
 *
 * @example
 * ```ts
 * import { Flow, type FlowOutputOf } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" })
 *   .step({ slug: "a" }, (i) => i.id.length)
 *   .step({ slug: "b", dependsOn: ["a"] }, (d) => ({ twice: d.a * 2 }));
 * type Out = FlowOutputOf<typeof flow>; // { b: { twice: number } }
 * ```
 *
 * For a union of flows (the versions an alias may start), the union of their outputs.
 */
export type FlowOutputOf<F extends FlowCarrier> = IsTypedFlow<F> extends true
  // Distributed over a union (the versions of an alias): one of their outputs, each whole.
  ? F extends FlowCarrier ? Simplify<
      & {
        -readonly [
          K in LeafSlug<F> as ExtractFlowStepsMeta<F>[K]["optional"] extends true ? never
            : K
        ]: ExtractFlowStepsMeta<F>[K]["output"];
      }
      & {
        -readonly [
          K in LeafSlug<F> as ExtractFlowStepsMeta<F>[K]["optional"] extends true ? K
            : never
        ]?: ExtractFlowStepsMeta<F>[K]["output"];
      }
    >
  : never
  : Json;
