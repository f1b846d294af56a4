/**
 * The types of the `Flow` builder's API: its options, the checks on handler outputs, and how each
 * added step widens the flow's type. Kept apart from the builder's run-time code in `flow.ts`.
 *
 * @module
 */
import type { Env } from "./context.ts";
// A type-only cycle: WithStep names the Flow class it produces.
import type { Flow } from "./flow.ts";
import type { Json, JsonOutput } from "./json.ts";
import type { RuntimeOptions, StepRuntimeOptions } from "./options.ts";
import type { FlowControlOptions } from "./flow_control.ts";
import type { AnySteps, ElementOf, HandlerInput, StepMeta } from "./types.ts";
import type { FlowCarrier } from "./extract.ts";
import type { FlowInputOf } from "./run_types.ts";
import type { StandardSchemaV1 } from "./input_schema.ts";
import type { Duration } from "./wait.ts";

/**
 * Options of `new Flow(...)`: the concrete slug plus flow-wide runtime options.
 *
 * @example
 * ```ts
 * import type { FlowOptions } from "@pgflow/shared";
 *
 * const options: FlowOptions = { slug: "thread_triage_v1", maxAttempts: 3 };
 * ```
 */
export interface FlowOptions extends RuntimeOptions, FlowControlOptions {
  /** The concrete flow slug; a new version is a new slug (`thread_triage_v2`). */
  readonly slug: string;
  /**
   * The stable name callers start (`thread_triage`), shared by every version of the flow. The first
   * version compiled with an alias creates it pointing at that version; an operator moves it to
   * another version with `pgflow.activate_alias` (docs/operations.md). Without one, the flow is
   * started by its slug. Same rules as a slug.
   */
  readonly alias?: string;
}

/** Rejects a slug already in the step table (exact match; case is checked at run time). */
export type NewSlug<TSteps extends AnySteps, Slug extends string> = Slug extends keyof TSteps
  ? never
  : Slug;

/** `whenUnmet` is only meaningful with a condition, so without one it must be absent. */
export type WhenUnmetOption<If, IfNot, Unmet> = [If, IfNot] extends [undefined, undefined] ? never
  : Unmet;

/** Options shared by `.step()`, `.array()` and `.map()` apart from slug and dependencies. */
export interface ConditionOptions<If, IfNot, Unmet, Exhausted>
  extends StepRuntimeOptions, FlowControlOptions {
  /** Run the step only when its input contains this pattern (jsonb `@>`). */
  readonly if?: If;
  /** Run the step only when its input does NOT contain this pattern. */
  readonly ifNot?: IfNot;
  /** What to do when the condition is not met (default `'skip'`); needs `if` or `ifNot`. */
  readonly whenUnmet?: WhenUnmetOption<If, IfNot, Unmet>;
  /** What to do when every attempt failed (default `'fail'`). */
  readonly whenExhausted?: Exhausted;
}

/**
 * Options of `.step()` and `.array()`.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ text: string }>({ slug: "moderate" })
 *   .step({ slug: "score", maxAttempts: 2, timeout: 10 }, (input) => input.text.length)
 *   .step({ slug: "flag", dependsOn: ["score"], if: { score: 0 } }, () => true);
 * ```
 */
export interface StepOptions<
  TSteps extends AnySteps,
  Slug extends string,
  Deps extends readonly string[],
  If,
  IfNot,
  Unmet,
  Exhausted,
> extends ConditionOptions<If, IfNot, Unmet, Exhausted> {
  /** The step slug, unique within the flow. */
  readonly slug: NewSlug<TSteps, Slug>;
  /** Steps (already defined) whose outputs this step receives. */
  readonly dependsOn?: Deps;
}

/**
 * Options of `.map()`: `array` names the one step whose output is mapped; without it the flow
 * input (which must then be an array) is mapped.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ urls: string[] }>({ slug: "crawl" })
 *   .array({ slug: "urls" }, (input) => input.urls)
 *   .map({ slug: "fetch", array: "urls" }, (url) => url.length);
 * ```
 */
export type MapOptions<
  TInput,
  TSteps extends AnySteps,
  Slug extends string,
  ArrayDep extends string,
  If,
  IfNot,
  Unmet,
  Exhausted,
> =
  & ConditionOptions<If, IfNot, Unmet, Exhausted>
  & { readonly slug: NewSlug<TSteps, Slug> }
  & ([TInput] extends [readonly unknown[]] ? { readonly array?: ArrayDep }
    : { readonly array: ArrayDep });

/**
 * A handler's declared return: `TOut` is inferred from the handler (the `NoInfer` half takes no
 * part in inference), then the returned value must also match its JSON-checked form. A
 * non-JSON part of the output becomes `never` there, so the handler fails to compile.
 */
export type Checked<TOut> = TOut & JsonOutput<NoInfer<TOut>>;

/** Like {@link Checked}, and the output must be an array (`.array()` feeds a map). */
export type CheckedArray<TOut> = TOut & JsonArrayOutput<NoInfer<TOut>>;

/** `.array()` handlers must return a JSON array. */
export type JsonArrayOutput<T> = [T] extends [readonly unknown[]] ? JsonOutput<T> : readonly Json[];

/** The item a map handler receives. */
export type MapItem<TInput, TSteps extends AnySteps, ArrayDep extends keyof TSteps> =
  [ArrayDep] extends [never] ? ElementOf<TInput>
    : ElementOf<TSteps[ArrayDep]["output"]>;

/** The flow type after one more step (its platform's resources kept, see `Flow`). */
export type WithStep<
  TInput,
  TContext,
  TEnv extends Env,
  TSteps extends AnySteps,
  TDeps extends DepsTable,
  Slug extends string,
  Dep extends string,
  Output,
  Optional extends boolean,
  TPlatform = Record<never, never>,
> = Flow<
  TInput,
  TContext,
  TEnv,
  TSteps & { readonly [K in Slug]: StepMeta<Output, Optional> },
  TDeps & { readonly [K in Slug]: Dep },
  TPlatform
>;

/**
 * Dependencies a `Flow` type carries: step slug → union of the slugs it depends on.
 *
 * @example
 * ```ts
 * import type { DepsTable } from "@pgflow/shared";
 *
 * const deps: DepsTable = {};
 * ```
 */
export type DepsTable = { readonly [slug: string]: string };

/**
 * The types a `Flow` carries only for the compiler. The property is declared, never set.
 *
 * @example
 * ```ts
 * import type { FlowTypes } from "@pgflow/shared";
 *
 * type T = FlowTypes<{ id: string }, Record<never, never>, Record<string, string>, {}, {}>;
 * ```
 */
export interface FlowTypes<
  TInput,
  TContext,
  TEnv,
  TSteps,
  TDeps,
  TPlatform = Record<never, never>,
> {
  /** The run input. */
  readonly input: TInput;
  /** The custom handler context. */
  readonly context: TContext;
  /** What the platform adds to every handler context (`sql` and `supabase` on Supabase). */
  readonly platform: TPlatform;
  /** The environment. */
  readonly env: TEnv;
  /** slug → {@link StepMeta}. */
  readonly steps: TSteps;
  /** slug → dependency slugs. */
  readonly deps: TDeps;
}

/**
 * `input` of a child-flow step: required when the step's own input is not already the child's
 * input, optional when it is (then the step's input is passed as it is).
 */
export type ChildInputOption<StepInput, TChild extends FlowCarrier> = [StepInput] extends
  [FlowInputOf<TChild>] ? {
    /**
     * Builds the child's input from the step's input by picking values (replayed in SQL: no
     * arithmetic, templates or calls). Default: the step's input as it is.
     */
    readonly input?: (input: StepInput) => FlowInputOf<TChild>;
  }
  : {
    /**
     * Builds the child's input from the step's input by picking values (replayed in SQL: no
     * arithmetic, templates or calls).
     */
    readonly input: (input: StepInput) => FlowInputOf<TChild>;
  };

/** What every child-flow step takes besides its slug, dependencies and input. */
export interface ChildFlowOptions<TChild extends FlowCarrier, If, IfNot, Unmet, Exhausted> {
  /** The flow each child run runs. */
  readonly flow: TChild;
  /** Start the child through the flow's alias (its active version then) instead of its slug. */
  readonly viaAlias?: boolean;
  /** Run the step only when its input contains this pattern (jsonb `@>`). */
  readonly if?: If;
  /** Run the step only when its input does NOT contain this pattern. */
  readonly ifNot?: IfNot;
  /** What to do when the condition is not met (default `'skip'`); needs `if` or `ifNot`. */
  readonly whenUnmet?: WhenUnmetOption<If, IfNot, Unmet>;
  /** What to do when a child run fails or is cancelled (default `'fail'`). */
  readonly whenExhausted?: Exhausted;
}

/**
 * Options of `.subflow()`: one child run of `flow`, its output the step's output.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * const enrich = new Flow<{ id: string }>({ slug: "enrich_v1" })
 *   .step({ slug: "profile" }, (input) => ({ name: `customer ${input.id}` }));
 * new Flow<{ customerId: string }>({ slug: "onboard_v1" })
 *   .subflow({ slug: "enriched", flow: enrich, input: (input) => ({ id: input.customerId }) });
 * ```
 */
export type SubflowOptions<
  TInput,
  TSteps extends AnySteps,
  Slug extends string,
  Deps extends readonly (keyof TSteps & string)[],
  TChild extends FlowCarrier,
  If,
  IfNot,
  Unmet,
  Exhausted,
> =
  & ChildFlowOptions<TChild, If, IfNot, Unmet, Exhausted>
  & {
    /** The step slug, unique within the flow. */
    readonly slug: NewSlug<TSteps, Slug>;
    /** Steps (already defined) whose outputs make up the step's input. */
    readonly dependsOn?: Deps;
  }
  & ChildInputOption<HandlerInput<TInput, TSteps, Deps[number]>, TChild>;

/**
 * Options of `.subflowMap()`: one child run of `flow` per element of `array` (or of the run
 * input), the step's output their outputs in element order.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * const enrich = new Flow<{ id: string }>({ slug: "enrich_v1" })
 *   .step({ slug: "profile" }, (input) => ({ name: `customer ${input.id}` }));
 * new Flow<{ ids: string[] }>({ slug: "onboard_all_v1" })
 *   .array({ slug: "ids" }, (input) => input.ids)
 *   .subflowMap({ slug: "each", array: "ids", flow: enrich, input: (id) => ({ id }) });
 * ```
 */
export type SubflowMapOptions<
  TInput,
  TSteps extends AnySteps,
  Slug extends string,
  ArrayDep extends string,
  TChild extends FlowCarrier,
  If,
  IfNot,
  Unmet,
  Exhausted,
> =
  & ChildFlowOptions<TChild, If, IfNot, Unmet, Exhausted>
  & { readonly slug: NewSlug<TSteps, Slug> }
  & ([TInput] extends [readonly unknown[]] ? { readonly array?: ArrayDep }
    : { readonly array: ArrayDep })
  & ChildInputOption<MapItem<TInput, TSteps, ArrayDep>, TChild>;

/** Options every waiting step takes besides its own: slug, dependencies and a condition. */
export interface WaitStepOptions<
  TSteps extends AnySteps,
  Slug extends string,
  Deps extends readonly string[],
  If,
  IfNot,
  Unmet,
  Exhausted,
> {
  /** The step slug, unique within the flow. */
  readonly slug: NewSlug<TSteps, Slug>;
  /** Steps (already defined) that must finish before the wait starts. */
  readonly dependsOn?: Deps;
  /** Wait only when the step's input contains this pattern (jsonb `@>`). */
  readonly if?: If;
  /** Wait only when the step's input does NOT contain this pattern. */
  readonly ifNot?: IfNot;
  /** What to do when the condition is not met (default `'skip'`); needs `if` or `ifNot`. */
  readonly whenUnmet?: WhenUnmetOption<If, IfNot, Unmet>;
  /** What a timeout that fails the step does (default `'fail'`: the run fails). */
  readonly whenExhausted?: Exhausted;
}

/**
 * Options of `.waitForEvent()`: the event, how it is matched, its payload's type or schema, and
 * what a timeout does.
 *
 * @example
 * ```ts
 * import { eventPayload, Flow } from "@pgflow/shared";
 *
 * new Flow<{ orderId: string }>({ slug: "approval_v1" }).waitForEvent({
 *   slug: "approval",
 *   event: "approved",
 *   key: "$.orderId",
 *   payload: eventPayload<{ ok: boolean }>(),
 *   timeout: "3 days",
 *   onTimeout: { value: { ok: false } },
 * });
 * ```
 */
export interface WaitForEventOptions<
  TSteps extends AnySteps,
  Slug extends string,
  Deps extends readonly string[],
  TPayload,
  TTimeout,
  If,
  IfNot,
  Unmet,
  Exhausted,
> extends WaitStepOptions<TSteps, Slug, Deps, If, IfNot, Unmet, Exhausted> {
  /** The event name `send_event` names (1 to 100 letters, digits, `_ . : -`). */
  readonly event: string;
  /** JSON path into the run input whose value a keyed event must carry (`"$.orderId"`). */
  readonly key?: string;
  /** The payload's Standard Schema, or `eventPayload<T>()` for a type only. Default: any JSON. */
  readonly payload?: StandardSchemaV1<unknown, TPayload>;
  /** How long to wait (`"3 days"`, or seconds); default: no timeout. */
  readonly timeout?: Duration;
  /** At the timeout: `"fail"` (default) or complete with `{ value }`. */
  readonly onTimeout?: "fail" | { readonly value: TTimeout };
}

/**
 * Options of `.sleep()`: `for` a duration, or `until` the time at a JSON path of the step's input.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ email: string }>({ slug: "remind_v1" }).sleep({ slug: "two_days", for: "2 days" });
 * ```
 */
export type SleepOptions<
  TSteps extends AnySteps,
  Slug extends string,
  Deps extends readonly string[],
  If,
  IfNot,
  Unmet,
  Exhausted,
> =
  & WaitStepOptions<TSteps, Slug, Deps, If, IfNot, Unmet, Exhausted>
  & (
    | { /** How long to sleep. */ readonly for: Duration; readonly until?: never }
    | {
      /** JSON path into the step's input to an ISO 8601 time to wake at. */ readonly until: string;
      readonly for?: never;
    }
  );
