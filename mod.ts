/**
 * @pgflow/shared: a Postgres-native workflow engine for Supabase with explicit shared queues and
 * multi-flow dispatch.
 *
 * Postgres (with PGMQ queues) orchestrates flows, a typed DSL defines them, and an Edge Worker runs
 * their steps. `routeFlow(flow, { queues })` puts any step of any flow or version on a named queue;
 * one worker polls one queue and runs exactly the (flow, step) pairs it has handlers for.
 *
 * This entry holds what a flow, a worker or a client needs: the DSL, routing, the worker, the
 * client, `createPool`, `createLogger`, their types and errors. What operators and tooling build
 * on (a flow's compiled shape, the coverage check, connection helpers, `bounded`) is in
 * `@pgflow/shared/tools`; the CLI is `@pgflow/shared/cli`.
 *
 * @example
 * ```ts
 * import { Flow, routeFlow } from "@pgflow/shared";
 *
 * const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}` }))
 *   .step({ slug: "deliver", dependsOn: ["classify"] }, (deps) => deps.classify.label);
 *
 * const routed = routeFlow(triage, {
 *   queues: { classify: "thread_processing", deliver: "slack_delivery" },
 * });
 * ```
 *
 * @module
 */

export { Flow } from "./src/dsl/flow.ts";
export { ENGINE_VERSION } from "./src/util/version.ts";
export type {
  Checked,
  CheckedArray,
  ConditionOptions,
  DepsTable,
  FlowOptions,
  FlowTypes,
  JsonArrayOutput,
  MapItem,
  MapOptions,
  NewSlug,
  StepOptions,
  WhenUnmetOption,
  WithStep,
} from "./src/dsl/builder_types.ts";
export { FlowDefinitionError } from "./src/dsl/errors.ts";
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
export type {
  QueueNameOf,
  StepSlugOf,
  WorkerConfigFor,
  WorkerSelection,
  WorkerStart,
  WorkerStartArgs,
  WorkerTarget,
} from "./src/routing/selection.ts";
export { EdgeWorker } from "./src/worker/edge_worker.ts";
export type { EdgeWorkerApi } from "./src/worker/edge_worker.ts";
export { createWorker } from "./src/worker/worker.ts";
export type { FlowWorker, WorkerState } from "./src/worker/worker.ts";
export type { EdgeWorkerConfig, PreparedStatementsMode, WakeupMode } from "./src/worker/config.ts";
export { WorkerConfigError, WorkerStartupError } from "./src/worker/errors.ts";
export { PayloadTooLarge } from "./src/util/payload_limit.ts";
export type { SupportedPair } from "./src/claim/claim.ts";
export type { WorkerEnv } from "./src/platform/env.ts";
export type { Sql, SupabaseClient } from "./src/platform/types.ts";
export { createPool } from "./src/platform/pool.ts";
export { DatabaseUrlError } from "./src/platform/database_url.ts";
export type { DatabaseUrlPart } from "./src/platform/database_url.ts";
export type { PoolOptions } from "./src/platform/pool.ts";
export type { SslSetting } from "./src/platform/wire_gate.ts";
export { DatabaseTimeoutError } from "./src/platform/deadline.ts";
export { DatabaseConnectionError } from "./src/operations/connection_problem.ts";
export { createLogger } from "./src/platform/logger.ts";
export type {
  LogFields,
  Logger,
  LoggerOptions,
  LogLevel,
  LogRecord,
  LogSink,
} from "./src/platform/logger.ts";
export { createClient } from "./src/client/client.ts";
export type {
  ClientFlows,
  ClientOptions,
  ClientTiming,
  ListRunsOptions,
  PgflowClient,
  StartFlowOptions,
} from "./src/client/client.ts";
export { ScheduleError } from "./src/client/schedules.ts";
export type {
  Schedule,
  ScheduleChanges,
  ScheduleClient,
  ScheduleSpec,
} from "./src/client/schedules.ts";
export type {
  EventsOptions,
  FlowRun,
  RestartOptions,
  RetryOptions,
  WaitForOptions,
} from "./src/client/run_handle.ts";
export {
  ClientClosedError,
  ClientConfigError,
  InputValidationError,
  RunActionError,
  RunCancelledError,
  RunError,
  RunFailedError,
  RunFlowMismatchError,
  RunNotFoundError,
  RunStatusError,
  RunTimeoutError,
  StartFlowError,
} from "./src/client/errors.ts";
export type {
  AttemptOutcome,
  CancelResult,
  FlowInputOf,
  FlowOutputOf,
  IsTypedFlow,
  LeafSlug,
  RestartMode,
  RunEvent,
  RunEventBase,
  RunLevelEvent,
  RunRestart,
  RunState,
  RunStatus,
  RunStepOutput,
  RunStepSlug,
  RunSummary,
  StepEvent,
  StepEventFor,
  StepState,
  StepStateFor,
  StepStatus,
  TaskAttempt,
} from "./src/client/types.ts";
