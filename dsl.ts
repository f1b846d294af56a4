/**
 * `@pgflow/shared/dsl`: the DSL and routing alone, for flow definitions that are type-checked and
 * unit-tested without the runtime. Importing it loads no postgres.js, no supabase-js and no worker
 * code.
 *
 * Its `Flow` is the DSL's own: its handler context has the task, the environment and the signals,
 * but no platform resources (no `ctx.sql`, no `ctx.supabase`). The `Flow` of `@pgflow/shared` is
 * the same builder preset for the Supabase platform, with those two in every handler context. A
 * flow built with either runs on a worker (`EdgeWorker.start`, `createWorker`).
 *
 * @example
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared/dsl";
 *
 * export const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}` }))
 *   .step({ slug: "deliver", dependsOn: ["classify"] }, (deps) => deps.classify.label);
 *
 * export const routed = routeFlow(triage, {
 *   queues: { classify: "thread_processing", deliver: "slack_delivery" },
 * });
 *
 * // A unit test reads the definition, or calls a handler with a context it builds:
 * const classify = triage.getStepDefinition("classify");
 * console.log(classify.dependencies); // []
 * ```
 *
 * @module
 */

export { Flow } from "./src/dsl/flow.ts";
export type {
  Checked,
  CheckedArray,
  ChildFlowOptions,
  ChildInputOption,
  ConditionOptions,
  DepsTable,
  FlowOptions,
  FlowTypes,
  JsonArrayOutput,
  MapItem,
  MapOptions,
  NewSlug,
  SleepOptions,
  StepOptions,
  SubflowMapOptions,
  SubflowOptions,
  WaitForEventOptions,
  WaitStepOptions,
  WhenUnmetOption,
  WithStep,
} from "./src/dsl/builder_types.ts";
export type { ChildFlowDefinition, ChildInputMapping } from "./src/dsl/child_flow.ts";
export { durationSeconds, eventPayload } from "./src/dsl/wait.ts";
export type {
  Duration,
  DurationUnit,
  EventWait,
  SleepWait,
  WaitDefinition,
} from "./src/dsl/wait.ts";
export { FlowDefinitionError } from "./src/dsl/errors.ts";
export { MAX_RETRY_AFTER_MS, RetryAfter } from "./src/dsl/retry_after.ts";
export type { RetryAfterOptions, RetryAfterResponse } from "./src/dsl/retry_after.ts";
export { StepTimedOut, WorkerShutdown } from "./src/dsl/abort_reasons.ts";
export type { ConcurrencyLimit, FlowControlOptions, RateLimit } from "./src/dsl/flow_control.ts";
export type {
  FlowInputSchemaOption,
  InputIssue,
  StandardSchemaV1,
  StandardSchemaV1Issue,
  StandardSchemaV1PathSegment,
  StandardSchemaV1Props,
  StandardSchemaV1Result,
  StandardSchemaV1Types,
} from "./src/dsl/input_schema.ts";
export { MAX_SLUG_LENGTH, validateSlug } from "./src/dsl/slug.ts";
export type {
  ContainmentPattern,
  Json,
  JsonOutput,
  JsonPrimitive,
  JsonValueCheck,
} from "./src/dsl/json.ts";
export { exactNumber, isExactNumber, parseJson } from "./src/util/json_parse.ts";
export type { ExactNumber } from "./src/util/json_parse.ts";
export type {
  Env,
  HandlerContext,
  PgmqMessageRecord,
  StepContext,
  StepTaskRecord,
} from "./src/dsl/context.ts";
export type { RuntimeOptions, StepRuntimeOptions, WhenMode } from "./src/dsl/options.ts";
export type {
  AnyStepHandler,
  AnySteps,
  ArrayStepSlug,
  DepsInput,
  ElementOf,
  HandlerInput,
  IsOptionalStep,
  PatternSlot,
  Simplify,
  StepDefinition,
  StepKind,
  StepMeta,
} from "./src/dsl/types.ts";
export type {
  AnyFlow,
  ExtractFlowContext,
  ExtractFlowDeps,
  ExtractFlowEnv,
  ExtractFlowInput,
  ExtractFlowSteps,
  ExtractFlowStepsMeta,
  ExtractHandlerContext,
  FlowCarrier,
  StepInput,
  StepOutput,
  StepSlug,
  TypesOf,
  UnwrapFlow,
} from "./src/dsl/extract.ts";
export { RoutingError } from "./src/routing/errors.ts";
export { MAX_QUEUE_NAME_LENGTH, validateQueueName } from "./src/routing/queue_name.ts";
export { privateQueueName } from "./src/routing/private_queue.ts";
export { routeFlow } from "./src/routing/route_flow.ts";
export type { NoUnknownSteps, RouteMap } from "./src/routing/route_flow.ts";
export { withStepQueues } from "./src/routing/with_step_queues.ts";
export type { RoutedFlow, StepQueuedFlow } from "./src/routing/routed.ts";
