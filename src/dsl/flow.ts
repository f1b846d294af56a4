import type { Env, HandlerContext } from "./context.ts";
import { FlowDefinitionError } from "./errors.ts";
import { canonicalJson, type ContainmentPattern, findNonJson, type Json } from "./json.ts";
import {
  pickStepRuntimeOptions,
  type RuntimeOptions,
  type StepRuntimeOptions,
  validateRuntimeOptions,
  validateStepRuntimeOptions,
  validateWhenMode,
  type WhenMode,
} from "./options.ts";
import { validateSlug } from "./slug.ts";
import { type FlowControlOptions, normalizeFlowControl } from "./flow_control.ts";
import {
  checkInputSchema,
  type FlowInputSchemaOption,
  type StandardSchemaV1,
} from "./input_schema.ts";
import type {
  AnyStepHandler,
  AnySteps,
  ArrayStepSlug,
  HandlerInput,
  IsOptionalStep,
  PatternSlot,
  StepDefinition,
  StepKind,
} from "./types.ts";
import { type ChildFlowDefinition, recordChildInput } from "./child_flow.ts";
import type { FlowCarrier } from "./extract.ts";
import type { FlowOutputOf } from "./run_types.ts";
import type {
  Checked,
  CheckedArray,
  DepsTable,
  FlowOptions,
  FlowTypes,
  MapItem,
  MapOptions,
  SleepOptions,
  StepOptions,
  SubflowMapOptions,
  SubflowOptions,
  WaitForEventOptions,
  WithStep,
} from "./builder_types.ts";
import { eventWait, sleepWait, type WaitDefinition, waitsInSql } from "./wait.ts";

/** Keys `.step()`, `.array()` and `.map()` accept, so typos fail at run time too. */
const STEP_KEYS: ReadonlySet<string> = new Set([
  "slug",
  "dependsOn",
  "maxAttempts",
  "baseDelay",
  "timeout",
  "startDelay",
  "if",
  "ifNot",
  "whenUnmet",
  "whenExhausted",
  "priority",
  "concurrency",
  "rateLimit",
]);
const MAP_KEYS: ReadonlySet<string> = new Set(
  [...STEP_KEYS].filter((key) => key !== "dependsOn").concat("array"),
);
const CHILD_KEYS = [
  "slug",
  "flow",
  "viaAlias",
  "input",
  "if",
  "ifNot",
  "whenUnmet",
  "whenExhausted",
];
const SUBFLOW_KEYS: ReadonlySet<string> = new Set(CHILD_KEYS.concat("dependsOn"));
const SUBFLOW_MAP_KEYS: ReadonlySet<string> = new Set(CHILD_KEYS.concat("array"));
const WAIT_KEYS = ["slug", "dependsOn", "if", "ifNot", "whenUnmet", "whenExhausted"];
const EVENT_KEYS: ReadonlySet<string> = new Set(
  WAIT_KEYS.concat("event", "key", "payload", "timeout", "onTimeout"),
);
const SLEEP_KEYS: ReadonlySet<string> = new Set(WAIT_KEYS.concat("for", "until"));
const FLOW_KEYS: ReadonlySet<string> = new Set([
  "slug",
  "alias",
  "maxAttempts",
  "baseDelay",
  "timeout",
  "input",
  "priority",
  "concurrency",
  "rateLimit",
]);

function rejectUnknownKeys(options: object, allowed: ReadonlySet<string>, where: string): void {
  for (const key of Object.keys(options)) {
    if (!allowed.has(key)) {
      const hint = key === "dependsOn"
        ? `a map step takes its one dependency as array: "<step>"`
        : `use one of ${[...allowed].join(", ")}`;
      throw new FlowDefinitionError(`${where}: unknown option "${key}"; ${hint}`);
    }
  }
}

function patternSlot(name: string, value: unknown, where: string): PatternSlot {
  if (value === undefined) return Object.freeze({ defined: false });
  const bad = findNonJson(value);
  if (bad !== undefined) {
    throw new FlowDefinitionError(
      `${where}: the ${name} pattern is not plain JSON at ${bad}; use only objects, arrays, ` +
        `strings, finite numbers, booleans and null`,
    );
  }
  return Object.freeze({ defined: true, value: deepFreeze(canonicalJson(value as Json)) });
}

function deepFreeze<T>(value: T): T {
  if (value !== null && typeof value === "object") {
    for (const item of Object.values(value)) deepFreeze(item);
    Object.freeze(value);
  }
  return value;
}

/** The raw option bag the run-time builder reads (the public overloads type it precisely). */
interface RawStepOptions extends StepRuntimeOptions, FlowControlOptions {
  readonly slug: string;
  readonly dependsOn?: readonly string[];
  readonly array?: string;
  readonly if?: unknown;
  readonly ifNot?: unknown;
  readonly whenUnmet?: WhenMode;
  readonly whenExhausted?: WhenMode;
}

/** The option bag `.subflow()` and `.subflowMap()` read at run time. */
interface RawChildOptions extends RawStepOptions {
  readonly flow?: unknown;
  readonly viaAlias?: unknown;
  readonly input?: unknown;
}

/** A child-flow step's handler: never called, since its tasks have no message to claim. */
const runsInSql: AnyStepHandler = () => {
  throw new Error(
    "a child-flow step runs another flow in SQL, not a handler; in runFlowInMemory, stand in for it with options.handlers",
  );
};

/** The child flow a step runs, checked, with its input mapping recorded. */
function childFlowOf(
  target: unknown,
  viaAlias: unknown,
  input: unknown,
  where: string,
): ChildFlowDefinition {
  const flow = target instanceof Flow
    ? target
    : target !== null && typeof target === "object" && "flow" in target &&
        target.flow instanceof Flow
    ? target.flow
    : undefined;
  if (flow === undefined) {
    throw new FlowDefinitionError(
      `${where}: flow must be the child Flow (or its routeFlow / withStepQueues form), got ${
        target === null ? "null" : typeof target
      }`,
    );
  }
  if (viaAlias !== undefined && typeof viaAlias !== "boolean") {
    throw new FlowDefinitionError(
      `${where}: viaAlias must be true or false, got ${typeof viaAlias}`,
    );
  }
  if (viaAlias === true && flow.alias === undefined) {
    throw new FlowDefinitionError(
      `${where}: viaAlias is set but flow "${flow.slug}" has no alias; give it one (new Flow({ alias })) or remove viaAlias`,
    );
  }
  return Object.freeze({
    flow: viaAlias === true ? flow.alias as string : flow.slug,
    input: recordChildInput(input, where),
  });
}

/**
 * A workflow definition: a DAG of steps under one concrete slug. The builder is immutable: each
 * `.step()`, `.array()` and `.map()` returns a new `Flow` whose type also knows the new step, so
 * handlers get exact input types, duplicate slugs and unknown dependencies fail to compile, and
 * non-JSON outputs are rejected. The same rules are checked at run time (mirroring SQL), so a
 * definition that builds is one the database accepts.
 *
 * Type parameters: `TInput` is the run input, `TContext` extra context your worker provides
 * to every handler, `TEnv` the environment's type; `TSteps` and `TDeps` are filled in by the
 * builder; `TPlatform` is what the platform adds to every handler context: nothing for this
 * `Flow` (of `@pgflow/shared/dsl`, which loads no runtime), `sql` and `supabase` for the `Flow`
 * of `@pgflow/shared`, a subclass that presets it.
 *
 * With `input: schema` (any Standard Schema: zod, valibot, arktype, ...) `TInput` is the schema's
 * output type, the client checks the input before starting a run (`InputValidationError`, no run
 * created) and the worker before the run's steps run (the run fails: "input failed its schema").
 *
 * ```ts
 * import { Flow, type StandardSchemaV1 } from "@pgflow/shared";
 *
 * declare const ThreadInput: StandardSchemaV1<unknown, { threadId: string }>; // e.g. a zod object
 * const checked = new Flow({ slug: "thread_check_v1", input: ThreadInput })
 *   .step({ slug: "load" }, (input) => input.threadId); // input: { threadId: string }
 * ```
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1", maxAttempts: 3 })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}`, urgent: true }))
 *   .step(
 *     { slug: "enrich", dependsOn: ["classify"], if: { classify: { urgent: true } } },
 *     (deps) => ({ summary: deps.classify.label }),
 *   )
 *   .step({ slug: "deliver", dependsOn: ["classify", "enrich"] }, async (deps, ctx) => {
 *     const run = await ctx.flowInput;
 *     return { threadId: run.threadId, summary: deps.enrich?.summary ?? null };
 *   });
 * ```
 */
export class Flow<
  TInput = Json,
  TContext = Record<never, never>,
  TEnv extends Env = Env,
  TSteps extends AnySteps = Record<never, never>,
  TDeps extends DepsTable = Record<never, never>,
  TPlatform = Record<never, never>,
> {
  /** The concrete flow slug. */
  readonly slug: string;
  /** The alias callers start this version through, if it has one (see `FlowOptions.alias`). */
  readonly alias: string | undefined;
  /** Flow-wide runtime options, only those that were set. */
  readonly options: RuntimeOptions;
  /** Flow-wide flow-control options (the default of each step that sets none), normalized. */
  readonly flowControl: FlowControlOptions;
  /**
   * The run input's schema (`input` of `new Flow`), if any: the client and the worker check run
   * inputs with it. It is code, not part of the compiled shape.
   */
  readonly inputSchema: StandardSchemaV1 | undefined;
  /** Step slugs in definition order (frozen): the order of the shape and of step indexes. */
  readonly stepOrder: readonly (keyof TSteps & string)[];
  /** Compile-time only: the flow's type parameters, read by the helper types. */
  declare readonly "~types"?: FlowTypes<TInput, TContext, TEnv, TSteps, TDeps, TPlatform>;

  #steps: ReadonlyMap<string, StepDefinition>;

  /**
   * Starts an empty flow. Throws a {@link FlowDefinitionError} for an invalid slug or option.
   *
   * @param options the concrete slug, flow-wide runtime options, and the input schema
   */
  constructor(options: FlowOptions & FlowInputSchemaOption<TInput>) {
    const where = `flow "${String(options?.slug)}"`;
    if (options === null || typeof options !== "object") {
      throw new FlowDefinitionError(
        `new Flow() needs an options object such as { slug: "my_flow" }`,
      );
    }
    rejectUnknownKeys(options, FLOW_KEYS, where);
    validateSlug(options.slug, "flow slug");
    if (options.alias !== undefined) validateSlug(options.alias, `alias of ${where}`);
    validateRuntimeOptions(options, where);
    this.inputSchema = checkInputSchema(options.input, where);
    this.slug = options.slug;
    this.alias = options.alias;
    this.flowControl = normalizeFlowControl(options, where);
    const {
      slug: _slug,
      alias: _alias,
      input: _input,
      priority: _priority,
      concurrency: _concurrency,
      rateLimit: _rateLimit,
      ...runtime
    } = options;
    this.options = pickStepRuntimeOptions(runtime);
    this.stepOrder = Object.freeze([]);
    this.#steps = new Map();
  }

  /**
   * Adds a step. Without `dependsOn` it is a root step and its handler receives the run input;
   * with it, the handler receives `{ [dependency]: output }` (optional keys for dependencies
   * that may be skipped with `'skip'`). Returns a new flow; this one is unchanged.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const flow = new Flow<{ n: number }>({ slug: "math" })
   *   .step({ slug: "double" }, (input) => input.n * 2)
   *   .step({ slug: "report", dependsOn: ["double"] }, (deps) => `n*2 = ${deps.double}`);
   * ```
   */
  step<
    const Slug extends string,
    const Deps extends readonly (keyof TSteps & string)[] = [],
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
    TOut = never,
  >(
    options: StepOptions<TSteps, Slug, Deps, If, IfNot, Unmet, Exhausted>,
    handler: (
      input: HandlerInput<TInput, TSteps, Deps[number]>,
      context: HandlerContext<TInput, TContext, TEnv, TPlatform>,
    ) => Checked<TOut> | Promise<Checked<TOut>>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    Deps[number],
    TOut,
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    return this.#add("single", options as RawStepOptions, handler as unknown as AnyStepHandler);
  }

  /**
   * Adds a step whose handler must return a JSON array, typically to feed a `.map()`. At run
   * time it behaves like `.step()`.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const flow = new Flow<{ text: string }>({ slug: "split" })
   *   .array({ slug: "words" }, (input) => input.text.split(" "));
   * ```
   */
  array<
    const Slug extends string,
    const Deps extends readonly (keyof TSteps & string)[] = [],
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
    TOut = never,
  >(
    options: StepOptions<TSteps, Slug, Deps, If, IfNot, Unmet, Exhausted>,
    handler: (
      input: HandlerInput<TInput, TSteps, Deps[number]>,
      context: HandlerContext<TInput, TContext, TEnv, TPlatform>,
    ) => CheckedArray<TOut> | Promise<CheckedArray<TOut>>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    Deps[number],
    TOut,
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    return this.#add("array", options as RawStepOptions, handler as unknown as AnyStepHandler);
  }

  /**
   * Adds a map step: one task per element of an array, the handler receiving one element. With
   * `array: "<step>"` it maps that step's output (its only dependency); without it, the run
   * input, which must then be an array. The output is the array of handler results.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const flow = new Flow<string[]>({ slug: "lengths" })
   *   .map({ slug: "length" }, (item) => item.length)
   *   .step({ slug: "total", dependsOn: ["length"] }, (deps) => deps.length.reduce((a, b) => a + b, 0));
   * ```
   */
  map<
    const Slug extends string,
    const ArrayDep extends ArrayStepSlug<TSteps> = never,
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, ArrayDep>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, ArrayDep>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
    TOut = never,
  >(
    options: MapOptions<TInput, TSteps, Slug, ArrayDep, If, IfNot, Unmet, Exhausted>,
    handler: (
      item: MapItem<TInput, TSteps, ArrayDep>,
      context: HandlerContext<TInput, TContext, TEnv, TPlatform>,
    ) => Checked<TOut> | Promise<Checked<TOut>>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    ArrayDep,
    TOut[],
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    return this.#add("map", options as RawStepOptions, handler as unknown as AnyStepHandler);
  }

  /**
   * Adds a child-flow step: its work is one run of another flow, started when the step is ready
   * (in SQL, with no worker and no message), and its output is that run's output. The child's
   * input is the step's input (`dependsOn` as for `.step()`), or what `input` picks from it; the
   * step completes when the child completes and fails (by `whenExhausted`) when it fails or is
   * cancelled. See docs/child-flows.md.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const enrich = new Flow<{ id: string }>({ slug: "enrich_v1" })
   *   .step({ slug: "profile" }, (input) => ({ name: `customer ${input.id}` }));
   * const onboard = new Flow<{ customerId: string }>({ slug: "onboard_v1" })
   *   .subflow({ slug: "enriched", flow: enrich, input: (input) => ({ id: input.customerId }) })
   *   .step({ slug: "greet", dependsOn: ["enriched"] }, (deps) => `hi ${deps.enriched.profile.name}`);
   * ```
   */
  subflow<
    const Slug extends string,
    TChild extends FlowCarrier,
    const Deps extends readonly (keyof TSteps & string)[] = [],
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
  >(
    options: SubflowOptions<TInput, TSteps, Slug, Deps, TChild, If, IfNot, Unmet, Exhausted>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    Deps[number],
    FlowOutputOf<TChild>,
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    return this.#addChild("single", options as unknown as RawChildOptions);
  }

  /**
   * Adds a map of child flows: one run of another flow per element of `array` (or of the run
   * input), started in SQL when the step is ready; the output is their outputs in element order.
   * `input` picks each child's input from its element. See docs/child-flows.md.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const enrich = new Flow<{ id: string }>({ slug: "enrich_v1" })
   *   .step({ slug: "profile" }, (input) => ({ name: `customer ${input.id}` }));
   * const onboardAll = new Flow<{ ids: string[] }>({ slug: "onboard_all_v1" })
   *   .array({ slug: "ids" }, (input) => input.ids)
   *   .subflowMap({ slug: "each", array: "ids", flow: enrich, input: (id) => ({ id }) })
   *   .step({ slug: "count", dependsOn: ["each"] }, (deps) => deps.each.length);
   * ```
   */
  subflowMap<
    const Slug extends string,
    TChild extends FlowCarrier,
    const ArrayDep extends ArrayStepSlug<TSteps> = never,
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, ArrayDep>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, ArrayDep>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
  >(
    options: SubflowMapOptions<TInput, TSteps, Slug, ArrayDep, TChild, If, IfNot, Unmet, Exhausted>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    ArrayDep,
    FlowOutputOf<TChild>[],
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    return this.#addChild("map", options as unknown as RawChildOptions);
  }

  /**
   * Adds an event step: no handler and no message. When its dependencies are done it waits (a row
   * in SQL, no worker) until `pgflow.send_event` (or the client's `sendEvent`, the CLI's
   * `pgflow events send`, a wait token) delivers its event; the event's payload is its output. An
   * event sent before the wait starts is kept and delivered then. With `timeout`, the tick ends
   * the wait: `onTimeout: "fail"` (default) fails the step, `{ value }` completes it with `value`.
   * See docs/waiting.md.
   *
   * @example
   * ```ts
   * import { eventPayload, Flow } from "@pgflow/shared";
   *
   * const approval = new Flow<{ orderId: string }>({ slug: "approval_v1" })
   *   .step({ slug: "submit" }, (input) => ({ orderId: input.orderId }))
   *   .waitForEvent({
   *     slug: "decision",
   *     dependsOn: ["submit"],
   *     event: "order_decided",
   *     key: "$.orderId",
   *     payload: eventPayload<{ approved: boolean }>(),
   *     timeout: "3 days",
   *     onTimeout: { value: { approved: false } },
   *   })
   *   .step({ slug: "ship", dependsOn: ["decision"], if: { decision: { approved: true } } }, () => "shipped");
   * ```
   */
  waitForEvent<
    const Slug extends string,
    const Deps extends readonly (keyof TSteps & string)[] = [],
    TPayload = Json,
    const TTimeout = never,
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
  >(
    options: WaitForEventOptions<
      TSteps,
      Slug,
      Deps,
      TPayload,
      TTimeout,
      If,
      IfNot,
      Unmet,
      Exhausted
    >,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    Deps[number],
    TPayload | TTimeout,
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    const raw = options as unknown as RawStepOptions & Record<string, unknown>;
    const where = `flow "${this.slug}", step "${String(raw?.slug)}"`;
    this.#checkOptionsObject(raw, "waitForEvent", '{ slug: "approval", event: "approved" }');
    rejectUnknownKeys(raw, EVENT_KEYS, where);
    const { event, key, payload, timeout, onTimeout, ...stepOptions } = raw;
    const wait = eventWait({ event, key, timeout, onTimeout }, where);
    const payloadSchema = checkInputSchema(payload, `${where}, payload`);
    return this.#add("single", stepOptions as RawStepOptions, waitsInSql, { wait, payloadSchema });
  }

  /**
   * Adds a durable sleep: no handler, no message, no worker while it sleeps. When its
   * dependencies are done it waits `for` a duration, or `until` the time found at a JSON path of
   * its input, and the periodic tick (about once a second) completes it; it survives restarts of
   * workers and of Postgres. Its output is the time it was due (ISO 8601). See docs/waiting.md.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const remind = new Flow<{ email: string }>({ slug: "remind_v1" })
   *   .step({ slug: "welcome" }, (input) => ({ sentTo: input.email }))
   *   .sleep({ slug: "two_days", dependsOn: ["welcome"], for: "2 days" })
   *   .step({ slug: "reminder", dependsOn: ["two_days"] }, async (_deps, ctx) => (await ctx.flowInput).email);
   * ```
   */
  sleep<
    const Slug extends string,
    const Deps extends readonly (keyof TSteps & string)[] = [],
    const If extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const IfNot extends ContainmentPattern<HandlerInput<TInput, TSteps, Deps[number]>> | undefined =
      undefined,
    const Unmet extends WhenMode = "skip",
    const Exhausted extends WhenMode = "fail",
  >(
    options: SleepOptions<TSteps, Slug, Deps, If, IfNot, Unmet, Exhausted>,
  ): WithStep<
    TInput,
    TContext,
    TEnv,
    TSteps,
    TDeps,
    Slug,
    Deps[number],
    string,
    IsOptionalStep<If, IfNot, Unmet, Exhausted>,
    TPlatform
  > {
    const raw = options as unknown as RawStepOptions & Record<string, unknown>;
    const where = `flow "${this.slug}", step "${String(raw?.slug)}"`;
    this.#checkOptionsObject(raw, "sleep", '{ slug: "pause", for: "2 days" }');
    rejectUnknownKeys(raw, SLEEP_KEYS, where);
    const { for: duration, until, ...stepOptions } = raw;
    const wait = sleepWait({ for: duration, until }, where);
    return this.#add("single", stepOptions as RawStepOptions, waitsInSql, { wait });
  }

  /**
   * The run-time definition of a step. Throws a {@link FlowDefinitionError} for an unknown slug.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
   * console.log(flow.getStepDefinition("a").dependencies); // []
   * ```
   */
  getStepDefinition(slug: keyof TSteps & string): StepDefinition {
    const step = this.#steps.get(slug);
    if (step === undefined) {
      throw new FlowDefinitionError(
        `flow "${this.slug}" has no step "${slug}"; known steps: ${
          this.stepOrder.join(", ") || "(none)"
        }`,
      );
    }
    return step;
  }

  /**
   * All step definitions in definition order.
   *
   * @example
   * ```ts
   * import { Flow } from "@pgflow/shared";
   *
   * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
   * console.log(flow.steps().map((step) => step.slug)); // ["a"]
   * ```
   */
  steps(): readonly StepDefinition[] {
    return this.stepOrder.map((slug) => this.getStepDefinition(slug));
  }

  #checkOptionsObject(options: unknown, method: string, sample: string): void {
    if (options === null || typeof options !== "object") {
      throw new FlowDefinitionError(
        `flow "${this.slug}": .${method}() needs an options object such as ${sample}`,
      );
    }
  }

  // deno-lint-ignore no-explicit-any
  #addChild(kind: "single" | "map", options: RawChildOptions): any {
    const where = `flow "${this.slug}", step "${String(options?.slug)}"`;
    if (options === null || typeof options !== "object") {
      throw new FlowDefinitionError(
        `flow "${this.slug}": .${
          kind === "map" ? "subflowMap" : "subflow"
        }() needs an options object such as { slug: "my_step", flow: otherFlow }`,
      );
    }
    rejectUnknownKeys(options, kind === "map" ? SUBFLOW_MAP_KEYS : SUBFLOW_KEYS, where);
    const { flow, viaAlias, input, ...stepOptions } = options;
    const child = childFlowOf(flow, viaAlias, input, where);
    return this.#add(kind, stepOptions, runsInSql, { child });
  }

  #add(
    kind: StepKind,
    options: RawStepOptions,
    handler: AnyStepHandler,
    sql: {
      readonly child?: ChildFlowDefinition;
      readonly wait?: WaitDefinition;
      readonly payloadSchema?: StandardSchemaV1;
    } = {},
    // deno-lint-ignore no-explicit-any
  ): any {
    const { child, wait, payloadSchema } = sql;
    if (options === null || typeof options !== "object") {
      throw new FlowDefinitionError(
        `flow "${this.slug}": .${
          methodName(kind)
        }() needs an options object such as { slug: "my_step" }`,
      );
    }
    const slug = options.slug;
    const where = `flow "${this.slug}", step "${String(slug)}"`;
    if (child === undefined && wait === undefined) {
      rejectUnknownKeys(options, kind === "map" ? MAP_KEYS : STEP_KEYS, where);
    }
    validateSlug(slug, `step slug in flow "${this.slug}"`);
    this.#checkUnique(slug);
    const dependencies = kind === "map"
      ? this.#mapDependencies(options.array, where)
      : this.#dependencies(options.dependsOn, where);
    validateStepRuntimeOptions(options, where);
    validateWhenMode("whenUnmet", options.whenUnmet, where);
    validateWhenMode("whenExhausted", options.whenExhausted, where);
    const requiredInputPattern = patternSlot("if", options.if, where);
    const forbiddenInputPattern = patternSlot("ifNot", options.ifNot, where);
    if (
      options.whenUnmet !== undefined && !requiredInputPattern.defined &&
      !forbiddenInputPattern.defined
    ) {
      throw new FlowDefinitionError(
        `${where}: whenUnmet: "${options.whenUnmet}" only applies to a condition; add if or ifNot, or remove whenUnmet`,
      );
    }
    if (typeof handler !== "function") {
      throw new FlowDefinitionError(
        `${where}: the handler must be a function, got ${typeof handler}`,
      );
    }
    const definition: StepDefinition = Object.freeze({
      slug,
      index: this.stepOrder.length,
      kind,
      dependencies: Object.freeze(dependencies),
      options: pickStepRuntimeOptions(options),
      flowControl: normalizeFlowControl(options, where),
      requiredInputPattern,
      forbiddenInputPattern,
      ...(options.whenUnmet === undefined ? {} : { whenUnmet: options.whenUnmet }),
      ...(options.whenExhausted === undefined ? {} : { whenExhausted: options.whenExhausted }),
      ...(child === undefined ? {} : { child }),
      ...(wait === undefined ? {} : { wait }),
      ...(payloadSchema === undefined ? {} : { payloadSchema }),
      handler,
    });
    // The flow's own class, so a platform's preset Flow (a subclass) stays one step after step.
    const next =
      new (this.constructor as typeof Flow<TInput, TContext, TEnv, TSteps, TDeps, TPlatform>)({
        slug: this.slug,
        ...(this.alias === undefined ? {} : { alias: this.alias }),
        ...this.options,
        ...this.flowControl,
      });
    const steps = new Map(this.#steps);
    steps.set(slug, definition);
    // The copy is private to this method, so assigning its read-only fields here is safe.
    (next as { stepOrder: readonly string[] }).stepOrder = Object.freeze([...this.stepOrder, slug]);
    next.#steps = steps;
    (next as { inputSchema: StandardSchemaV1 | undefined }).inputSchema = this.inputSchema;
    return next;
  }

  #checkUnique(slug: string): void {
    if (this.#steps.has(slug)) {
      throw new FlowDefinitionError(
        `flow "${this.slug}" already has a step "${slug}"; give the new step another slug`,
      );
    }
    const lower = slug.toLowerCase();
    const clash = this.stepOrder.find((existing) => existing.toLowerCase() === lower);
    if (clash !== undefined) {
      throw new FlowDefinitionError(
        `flow "${this.slug}": step "${slug}" differs from existing step "${clash}" only in case; ` +
          `step slugs are unique ignoring case, so pick another slug`,
      );
    }
  }

  #dependencies(dependsOn: unknown, where: string): string[] {
    if (dependsOn === undefined) return [];
    if (!Array.isArray(dependsOn)) {
      throw new FlowDefinitionError(
        `${where}: dependsOn must be an array of step slugs, e.g. dependsOn: ["fetch"]`,
      );
    }
    const seen = new Set<string>();
    for (const dep of dependsOn) {
      this.#checkKnown(dep, where);
      if (seen.has(dep)) {
        throw new FlowDefinitionError(`${where}: dependsOn lists "${dep}" twice; list it once`);
      }
      seen.add(dep);
    }
    return [...dependsOn];
  }

  #mapDependencies(array: unknown, where: string): string[] {
    if (array === undefined) return [];
    if (typeof array !== "string") {
      throw new FlowDefinitionError(
        `${where}: array must name one step, e.g. array: "fetch_items"; a map step has at most one dependency`,
      );
    }
    this.#checkKnown(array, where);
    return [array];
  }

  #checkKnown(dep: unknown, where: string): void {
    if (typeof dep !== "string" || !this.#steps.has(dep)) {
      throw new FlowDefinitionError(
        `${where} depends on ${JSON.stringify(dep) ?? String(dep)}, which is not a step of this ` +
          `flow yet; define it first (known steps: ${this.stepOrder.join(", ") || "none"})`,
      );
    }
  }
}

function methodName(kind: StepKind): string {
  return kind === "single" ? "step" : kind;
}
