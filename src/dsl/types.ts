import type { ChildFlowDefinition } from "./child_flow.ts";
import type { WaitDefinition } from "./wait.ts";
import type { StandardSchemaV1 } from "./input_schema.ts";
import type { Json } from "./json.ts";
import type { StepRuntimeOptions, WhenMode } from "./options.ts";
import type { FlowControlOptions } from "./flow_control.ts";
import type { StepContext } from "./context.ts";

/**
 * What the type system remembers about one step: its output type and whether dependents may
 * see it missing (only `'skip'` makes it optional: with `'skip-cascade'` the dependents are
 * skipped too, so when they run the key is always there).
 *
 * @example
 * ```ts
 * import type { StepMeta } from "@pgflow/shared";
 *
 * type Classify = StepMeta<{ label: string }, false>;
 * ```
 */
export interface StepMeta<TOutput = unknown, TOptional extends boolean = boolean> {
  /** The step's (JSON) output type. */
  readonly output: TOutput;
  /** Whether the step may be skipped with `'skip'`, making its key optional downstream. */
  readonly optional: TOptional;
}

/**
 * The step table a `Flow` type carries: slug → {@link StepMeta}.
 *
 * @example
 * ```ts
 * import type { AnySteps } from "@pgflow/shared";
 *
 * const steps: AnySteps = {};
 * ```
 */
export type AnySteps = { readonly [slug: string]: StepMeta };

/**
 * Flattens an intersection into one object type so editors show readable hovers.
 *
 * @example
 * ```ts
 * import type { Simplify } from "@pgflow/shared";
 *
 * type AB = Simplify<{ a: 1 } & { b: 2 }>; // { a: 1; b: 2 }
 * ```
 */
export type Simplify<T> = { [K in keyof T]: T[K] } & unknown;

/**
 * The object a dependent handler receives: one key per dependency, optional for dependencies
 * that may be skipped with `'skip'`.
 *
 * @example
 * ```ts
 * import type { DepsInput, StepMeta } from "@pgflow/shared";
 *
 * type In = DepsInput<{ a: StepMeta<number, false>; b: StepMeta<string, true> }, "a" | "b">;
 * // { a: number; b?: string }
 * ```
 */
export type DepsInput<TSteps extends AnySteps, K extends keyof TSteps> = Simplify<
  & { -readonly [P in K as TSteps[P]["optional"] extends true ? never : P]: TSteps[P]["output"] }
  & { -readonly [P in K as TSteps[P]["optional"] extends true ? P : never]?: TSteps[P]["output"] }
>;

/**
 * A handler's first argument: the flow input for a root step, the dependency object otherwise.
 *
 * @example
 * ```ts
 * import type { HandlerInput, StepMeta } from "@pgflow/shared";
 *
 * type Root = HandlerInput<{ id: string }, { a: StepMeta<number, false> }, never>; // { id: string }
 * type Dep = HandlerInput<{ id: string }, { a: StepMeta<number, false> }, "a">; // { a: number }
 * ```
 */
export type HandlerInput<TInput, TSteps extends AnySteps, TDep extends keyof TSteps> =
  [TDep] extends [never] ? TInput
    : DepsInput<TSteps, TDep>;

/**
 * Whether a step with these condition and exhaustion settings can be skipped with `'skip'`.
 * A condition without `whenUnmet` defaults to `'skip'` (the SQL default).
 */
export type IsOptionalStep<If, IfNot, Unmet, Exhausted> = [Exhausted] extends ["skip"] ? true
  : [If, IfNot] extends [undefined, undefined] ? false
  : [Unmet] extends ["skip"] ? true
  : false;

/** The element type of an array type (never for non-arrays). */
export type ElementOf<T> = T extends readonly (infer E)[] ? E : never;

/** Slugs of steps whose output is an array: what a dependent `.map()` may name in `array:`. */
export type ArrayStepSlug<TSteps extends AnySteps> =
  & {
    [K in keyof TSteps]: TSteps[K]["output"] extends readonly unknown[] ? K : never;
  }[keyof TSteps]
  & string;

/**
 * The kind of a step: `single` (`.step`), `array` (`.array`, a single step that must return an
 * array) or `map` (`.map`, one task per element).
 *
 * @example
 * ```ts
 * import type { StepKind } from "@pgflow/shared";
 *
 * const kind: StepKind = "map";
 * ```
 */
export type StepKind = "single" | "array" | "map";

/**
 * A condition pattern slot: `{ defined: false }` when absent, so "no pattern" is distinct from a
 * JSON `null` pattern.
 *
 * @example
 * ```ts
 * import type { PatternSlot } from "@pgflow/shared";
 *
 * const none: PatternSlot = { defined: false };
 * const some: PatternSlot = { defined: true, value: { plan: "pro" } };
 * ```
 */
export type PatternSlot = { readonly defined: false } | {
  readonly defined: true;
  readonly value: Json;
};

/**
 * The run-time handler signature every step is stored with. Dispatch passes the input SQL built
 * and the context; the precise types were checked when the step was defined.
 *
 * @example
 * ```ts
 * import type { AnyStepHandler } from "@pgflow/shared";
 *
 * const handler: AnyStepHandler = (input) => input;
 * ```
 */
export type AnyStepHandler = (
  input: Json,
  context: StepContext<Json> & { readonly [key: string]: unknown },
) => unknown;

/**
 * The run-time definition of one step, in the order it was added.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * console.log(flow.getStepDefinition("a").index); // 0
 * ```
 */
export interface StepDefinition {
  /** The step slug. */
  readonly slug: string;
  /** 0-based position in definition order (the SQL `step_index`). */
  readonly index: number;
  /** How the step was added. */
  readonly kind: StepKind;
  /** Dependency slugs as written (for a map: its `array` step, if any). */
  readonly dependencies: readonly string[];
  /** Only the runtime options that were set. */
  readonly options: StepRuntimeOptions;
  /** The step's own flow-control options, normalized (the flow's apply where it sets none). */
  readonly flowControl: FlowControlOptions;
  /** The `if` pattern. */
  readonly requiredInputPattern: PatternSlot;
  /** The `ifNot` pattern. */
  readonly forbiddenInputPattern: PatternSlot;
  /** `whenUnmet` as written, if it was. */
  readonly whenUnmet?: WhenMode;
  /** `whenExhausted` as written, if it was. */
  readonly whenExhausted?: WhenMode;
  /** For a child-flow step (`.subflow()`, `.subflowMap()`): the flow it runs and its input. */
  readonly child?: ChildFlowDefinition;
  /** For a waiting step (`.waitForEvent()`, `.sleep()`): what it waits for. */
  readonly wait?: WaitDefinition;
  /** An event step's payload schema, if any: the client checks payloads with it. */
  readonly payloadSchema?: StandardSchemaV1;
  /** The handler. */
  readonly handler: AnyStepHandler;
}
