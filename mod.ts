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

// The DSL and routing, as `@pgflow/shared/dsl` exports them; its `Flow`, `StepContext` and
// `HandlerContext` give way to the platform's presets below (an explicit export wins over `*`).
export * from "./dsl.ts";
export { Flow } from "./src/platform/supabase.ts";
export type { HandlerContext, StepContext } from "./src/platform/supabase.ts";
export { ENGINE_VERSION } from "./src/util/version.ts";
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
export { createWorker } from "./src/worker/create_worker.ts";
export type { FlowWorker, WorkerState } from "./src/worker/flow_worker.ts";
export type { EdgeWorkerConfig, PreparedStatementsMode, WakeupMode } from "./src/worker/config.ts";
export { WorkerConfigError, WorkerStartupError } from "./src/worker/errors.ts";
export { PayloadTooLarge } from "./src/util/payload_limit.ts";
export type { SupportedPair } from "./src/task/claim.ts";
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
export { EventPayloadError } from "./src/client/events.ts";
export type {
  EventAddress,
  EventDelivery,
  EventPayloadOf,
  EventStepSlug,
  SendEventResult,
} from "./src/client/events.ts";
export type {
  ClientFlows,
  ClientOptions,
  ClientTiming,
  ListRunsOptions,
  PgflowClient,
  StartFlowOptions,
  StartFlowsOptions,
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
  ChildRun,
  FlowInputOf,
  FlowOutputOf,
  IsTypedFlow,
  LeafSlug,
  QueueWaitingTasks,
  RestartMode,
  RunEvent,
  RunEventBase,
  RunLevelEvent,
  RunParent,
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
  StepWait,
  TaskAttempt,
  WaitingTasks,
} from "./src/client/types.ts";
