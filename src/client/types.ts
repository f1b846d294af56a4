/**
 * The types of the client: what a run looks like, what its events are, and how both are typed
 * from the flow definition.
 *
 * @module
 */
import type { ExtractFlowStepsMeta, FlowCarrier, StepSlug } from "../dsl/extract.ts";
import type { Json } from "../util/json.ts";

export type { FlowInputOf, FlowOutputOf, IsTypedFlow, LeafSlug } from "../dsl/run_types.ts";
import type { FlowInputOf, FlowOutputOf, IsTypedFlow } from "../dsl/run_types.ts";

/**
 * Step slugs of `F` (`string` when `F` is not given).
 *
 * @example
 * ```ts
 * import { Flow, type RunStepSlug } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type Slugs = RunStepSlug<typeof flow>; // "a"
 * ```
 */
export type RunStepSlug<F extends FlowCarrier> = IsTypedFlow<F> extends true ? StepSlug<F> : string;

/**
 * The output of step `K` of `F` (`Json` when `F` is not given).
 *
 * @example
 * ```ts
 * import { Flow, type RunStepOutput } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id.length);
 * type A = RunStepOutput<typeof flow, "a">; // number
 * ```
 */
export type RunStepOutput<F extends FlowCarrier, K extends string> = IsTypedFlow<F> extends true
  ? K extends StepSlug<F> ? ExtractFlowStepsMeta<F>[K]["output"] : never
  : Json;

/**
 * A run's status.
 *
 * @example
 * ```ts
 * import type { RunStatus } from "@pgflow/shared";
 *
 * const done: RunStatus = "completed";
 * ```
 */
export type RunStatus = "started" | "completed" | "failed" | "cancelled";

/**
 * A step's status within a run (`cancelled`: it had not finished when its run was cancelled).
 *
 * @example
 * ```ts
 * import type { StepStatus } from "@pgflow/shared";
 *
 * const waiting: StepStatus = "created";
 * ```
 */
export type StepStatus =
  | "created"
  | "started"
  | "completed"
  | "failed"
  | "skipped"
  | "cancelled";

/**
 * How an attempt of a task ended other than by completing: `failed` (its handler threw, or ran
 * past its step's timeout), `stalled` (stalled recovery took it back from a worker that went
 * silent), `cancelled` (its run was cancelled while it ran), `deferred` (its handler threw
 * `RetryAfter`) or `interrupted` (its worker shut down under it). The last two do not count toward
 * `maxAttempts`.
 *
 * @example
 * ```ts
 * import type { AttemptOutcome } from "@pgflow/shared";
 *
 * const outcome: AttemptOutcome = "stalled";
 * ```
 */
export type AttemptOutcome = "failed" | "stalled" | "cancelled" | "deferred" | "interrupted";

/**
 * One attempt of a task that ended other than by completing (`pgflow.task_attempts`): a completed
 * attempt is the step's own output and times. Never holds inputs, outputs or message bodies.
 *
 * @example
 * ```ts
 * import type { TaskAttempt } from "@pgflow/shared";
 *
 * const line = (a: TaskAttempt) => `#${a.attempt} ${a.outcome}: ${a.errorMessage ?? ""}`;
 * ```
 */
export interface TaskAttempt {
  /** The task within its step (0 for a single step; the element's index in a map). */
  readonly taskIndex: number;
  /** The attempt's number, from 1. */
  readonly attempt: number;
  /** The worker that ran it, when known. */
  readonly workerId: string | null;
  /** When it started (UTC, microseconds), when known. */
  readonly startedAt: string | null;
  /** When it ended. */
  readonly endedAt: string | null;
  /** How it ended. */
  readonly outcome: AttemptOutcome;
  /** The error's message (at most 2,000 characters), else `null`. */
  readonly errorMessage: string | null;
  /** The error's stack trace (at most 4,000 characters), else `null`. */
  readonly errorStack: string | null;
}

/**
 * Tasks waiting for capacity under one flow-control limit, one `(scope, key)`: created without a
 * message (neither queued nor lost), released when a unit of the key's capacity frees
 * (docs/flow-control.md). `RunState` steps list theirs (`StepState.waiting`).
 *
 * @example
 * ```ts
 * import type { WaitingTasks } from "@pgflow/shared";
 *
 * // "2 tasks: concurrency slack-api key C042: 1 of 1 in flight"
 * const line = (w: WaitingTasks) => `${w.tasks} tasks: ${w.reason}`;
 * ```
 */
export interface WaitingTasks {
  /** The limit's scope (`"slack-api"`, or `"<alias or flow>/<step>"`). */
  readonly limitScope: string;
  /** The key the task's input gave (`""`: the step has no key path, or it found nothing). */
  readonly limitKey: string;
  /** How many tasks wait. */
  readonly tasks: number;
  /** When the oldest of them was created (UTC, microseconds). */
  readonly since: string;
  /** The key's tasks holding capacity now (queued or started), of any run, flow or queue. */
  readonly inFlight: number;
  /** The scope's limit; `null` when none is set (its tasks are released at the next tick). */
  readonly maxRunning: number | null;
  /** Why they wait, e.g. `concurrency slack-api key C042: 1 of 1 in flight`. */
  readonly reason: string;
}

/**
 * Tasks waiting for capacity on one queue under one `(scope, key)`: what `client.waitingTasks`
 * lists (`pgflow.waiting_tasks`).
 *
 * @example
 * ```ts
 * import type { QueueWaitingTasks } from "@pgflow/shared";
 *
 * const line = (w: QueueWaitingTasks) => `${w.queueName}: ${w.tasks} waiting since ${w.since}`;
 * ```
 */
export interface QueueWaitingTasks extends WaitingTasks {
  /** The queue their messages will be sent to. */
  readonly queueName: string;
}

/**
 * How a run was started from another: `retry` (the same input, everything again) or `resume`
 * (what completed in the source is reused, the rest runs).
 *
 * @example
 * ```ts
 * import type { RestartMode } from "@pgflow/shared";
 *
 * const mode: RestartMode = "resume";
 * ```
 */
export type RestartMode = "retry" | "resume";

/**
 * A run made from another by a retry or a resume, as its source lists it (`RunState.restarts`,
 * `RunSummary.restarts`): "retried as …", "resumed as …".
 *
 * @example
 * ```ts
 * import type { RunRestart } from "@pgflow/shared";
 *
 * const say = (r: RunRestart) => `${r.mode === "retry" ? "retried" : "resumed"} as ${r.runId}`;
 * ```
 */
export interface RunRestart {
  /** The new run. */
  readonly runId: string;
  /** How it was made. */
  readonly mode: RestartMode;
  /** Its status when read. */
  readonly status: RunStatus;
  /** When it started (UTC, microseconds). */
  readonly startedAt: string;
}

/**
 * The run, step and task a child run was started for (a child-flow step, `.subflow()` or
 * `.subflowMap()`): `RunState.parent`.
 *
 * @example
 * ```ts
 * import type { RunParent } from "@pgflow/shared";
 *
 * const say = (p: RunParent) => `child of ${p.runId} (${p.stepSlug} [${p.taskIndex}])`;
 * ```
 */
export interface RunParent {
  /** The parent run. */
  readonly runId: string;
  /** Its child-flow step. */
  readonly stepSlug: string;
  /** The task (a map's element index; 0 for a single child). */
  readonly taskIndex: number;
}

/**
 * A child run of a child-flow step, as the parent's step lists it (`StepState.children`).
 *
 * @example
 * ```ts
 * import type { ChildRun } from "@pgflow/shared";
 *
 * const open = (children: readonly ChildRun[]) => children.filter((c) => c.status === "started");
 * ```
 */
export interface ChildRun {
  /** The task it runs for (a map's element index). */
  readonly taskIndex: number;
  /** The child run. */
  readonly runId: string;
  /** Its status when read (`null` when it has been pruned). */
  readonly status: RunStatus | null;
}

/**
 * One step of a {@link RunState}, for one step slug `K`.
 *
 * @example
 * ```ts
 * import { Flow, type StepStateFor } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type A = StepStateFor<typeof flow, "a">["output"]; // string | null
 * ```
 */
export interface StepStateFor<F extends FlowCarrier, K extends string> {
  /** The step's slug. */
  readonly stepSlug: K;
  /** Its position in the flow definition (dependencies come first). */
  readonly stepIndex: number;
  /** `single` or `map`. */
  readonly stepType: "single" | "map";
  /** Its status. */
  readonly status: StepStatus;
  /** Its output once completed (a map step: the outputs in index order), else `null`. */
  readonly output: RunStepOutput<F, K> | null;
  /** The last error of its tasks (set while it retries, and when it failed), else `null`. */
  readonly error: string | null;
  /** Why it was skipped (`condition_unmet`, `dependency_skipped`, ...), else `null`. */
  readonly skipReason: string | null;
  /** How many tasks it started with (map steps: one per element); `null` before it started. */
  readonly initialTasks: number | null;
  /** How many of them are not done yet; `null` before it started. */
  readonly remainingTasks: number | null;
  /** When it started (UTC, microseconds: `2026-12-03T08:00:00.123456Z`), else `null`. */
  readonly startedAt: string | null;
  /** When it completed, else `null`. */
  readonly completedAt: string | null;
  /** When it failed, else `null`. */
  readonly failedAt: string | null;
  /** When it was skipped, else `null`. */
  readonly skippedAt: string | null;
  /** When its run's cancellation ended it, else `null`. */
  readonly cancelledAt: string | null;
  /**
   * Whether a resume took it over from the source run instead of running it again: as completed
   * (with its output), or as skipped when a completed step was built on that skip.
   */
  readonly reused: boolean;
  /**
   * Its tasks' attempts that ended other than by completing, in (task, attempt) order: at most
   * 100 per step, the newest kept.
   */
  readonly attempts: readonly TaskAttempt[];
  /**
   * Its tasks waiting for capacity (flow control), per `(scope, key)`, oldest first; empty when
   * none waits. A started step whose tasks all wait has not been handed to any worker yet.
   */
  readonly waiting: readonly WaitingTasks[];
  /** The flow a child-flow step runs (a slug or an alias), else `null`. */
  readonly childFlow: string | null;
  /** A child-flow step's child runs by task index (the first 1,000), else empty. */
  readonly children: readonly ChildRun[];
  /**
   * For an event step or a sleep (`.waitForEvent()`, `.sleep()`) once it started waiting: what it
   * waits for, since when and until when; `null` for a task step or a wait not started yet. The
   * step is waiting while its status is `started`.
   */
  readonly wait: StepWait | null;
}

/**
 * What an event step or a sleep waits for (docs/waiting.md).
 *
 * @example
 * ```ts
 * import type { StepWait } from "@pgflow/shared";
 *
 * const note = (w: StepWait) => w.kind === "sleep" ? `until ${w.until}` : `for ${w.event}`;
 * ```
 */
export interface StepWait {
  /** `event` or `sleep`. */
  readonly kind: "event" | "sleep";
  /** The event it waits for; `null` for a sleep. */
  readonly event: string | null;
  /** Its correlation key (from the run input), if the step has a key path. */
  readonly key: string | null;
  /** When the wait started. */
  readonly since: string | null;
  /** Its timeout or wake time; `null`: no timeout. */
  readonly until: string | null;
}

/**
 * The state of one step of a run: a union over the flow's step slugs, so narrowing on `stepSlug`
 * types `output`.
 *
 * @example
 * ```ts
 * import type { StepState } from "@pgflow/shared";
 *
 * function done(step: StepState): boolean {
 *   return step.status === "completed" || step.status === "skipped";
 * }
 * ```
 */
export type StepState<F extends FlowCarrier = never> = RunStepSlug<F> extends infer K extends string
  ? K extends unknown ? StepStateFor<F, K> : never
  : never;

/**
 * A run with every step: what `client.getRun` and `run.state()` return (`pgflow.get_run` in SQL).
 *
 * @example
 * ```ts
 * import type { RunState } from "@pgflow/shared";
 *
 * function summary(run: RunState): string {
 *   return `${run.flowSlug} ${run.status}: ${run.steps.length} steps`;
 * }
 * ```
 */
export interface RunState<F extends FlowCarrier = never> {
  /** The run's id. */
  readonly runId: string;
  /** The flow it runs. */
  readonly flowSlug: string;
  /** Its status. */
  readonly status: RunStatus;
  /** Its input. */
  readonly input: FlowInputOf<F>;
  /** Its output once completed (see {@link FlowOutputOf}), else `null`. */
  readonly output: FlowOutputOf<F> | null;
  /** Why it failed, else `null`. */
  readonly error: string | null;
  /** Steps not finished yet. */
  readonly remainingSteps: number;
  /** When it started (UTC, microseconds). */
  readonly startedAt: string;
  /** When it completed, else `null`. */
  readonly completedAt: string | null;
  /** When it failed, else `null`. */
  readonly failedAt: string | null;
  /** When it was cancelled, else `null`. */
  readonly cancelledAt: string | null;
  /** The reason given when it was cancelled, else `null`. */
  readonly cancelReason: string | null;
  /** The run it retries or resumes, else `null`. */
  readonly restartOfRunId: string | null;
  /** `retry` or `resume` when it was started from another run, else `null`. */
  readonly restartMode: RestartMode | null;
  /** The alias it was started through (`startFlow("thread_triage", …)`), else `null`. */
  readonly startedAs: string | null;
  /** The runs made from this one by `retry` or `resume`, newest first (at most 20). */
  readonly restarts: readonly RunRestart[];
  /** The run, step and task this one was started for, when it is a child run; else `null`. */
  readonly parent: RunParent | null;
  /** Every step, in definition order. */
  readonly steps: readonly StepState<F>[];
}

/**
 * Fields every run event has.
 *
 * @example
 * ```ts
 * import type { RunEventBase } from "@pgflow/shared";
 *
 * const when = (e: RunEventBase) => new Date(e.at);
 * ```
 */
export interface RunEventBase {
  /** The run the event belongs to. */
  readonly runId: string;
  /** When it happened (UTC, microseconds: `2026-12-03T08:00:00.123456Z`). */
  readonly at: string;
}

/**
 * The step events for one step slug `K`.
 *
 * @example
 * ```ts
 * import { Flow, type StepEventFor } from "@pgflow/shared";
 *
 * const flow = new Flow<{ id: string }>({ slug: "demo" }).step({ slug: "a" }, (i) => i.id);
 * type Done = Extract<StepEventFor<typeof flow, "a">, { type: "step:completed" }>["output"]; // string
 * ```
 */
export type StepEventFor<F extends FlowCarrier, K extends string> =
  | (RunEventBase & { readonly type: "step:started"; readonly stepSlug: K })
  | (RunEventBase & {
    readonly type: "step:completed";
    readonly stepSlug: K;
    readonly output: RunStepOutput<F, K>;
  })
  | (RunEventBase & { readonly type: "step:failed"; readonly stepSlug: K; readonly error: string })
  | (RunEventBase & {
    readonly type: "step:skipped";
    readonly stepSlug: K;
    readonly reason: string;
  })
  | (RunEventBase & { readonly type: "step:cancelled"; readonly stepSlug: K });

/**
 * A step event: `step:started`, `step:completed` (with the step's output), `step:failed` (with
 * its error), `step:skipped` (with the reason) or `step:cancelled` (it had not finished when its
 * run was cancelled), typed per step slug.
 *
 * @example
 * ```ts
 * import type { StepEvent } from "@pgflow/shared";
 *
 * const log = (e: StepEvent) => console.log(e.type, e.stepSlug);
 * ```
 */
export type StepEvent<F extends FlowCarrier = never> = RunStepSlug<F> extends infer K extends string
  ? K extends unknown ? StepEventFor<F, K> : never
  : never;

/**
 * A run event: `run:started` (with the input), `run:completed` (with the output),
 * `run:failed` (with the error and the failing step, if one failed) or `run:cancelled` (with the
 * reason given, if any).
 *
 * @example
 * ```ts
 * import type { RunLevelEvent } from "@pgflow/shared";
 *
 * const done = (e: RunLevelEvent) => e.type !== "run:started";
 * ```
 */
export type RunLevelEvent<F extends FlowCarrier = never> =
  | (RunEventBase & {
    readonly type: "run:started";
    readonly flowSlug: string;
    readonly input: FlowInputOf<F>;
  })
  | (RunEventBase & { readonly type: "run:completed"; readonly output: FlowOutputOf<F> })
  | (RunEventBase & {
    readonly type: "run:failed";
    readonly error: string;
    readonly stepSlug: RunStepSlug<F> | null;
  })
  | (RunEventBase & { readonly type: "run:cancelled"; readonly reason: string | null });

/**
 * What `run.events()` yields, in the order things happened: the run's and its steps' transitions.
 *
 * @example
 * ```ts
 * import type { RunEvent } from "@pgflow/shared";
 *
 * function line(e: RunEvent): string {
 *   return e.type.startsWith("step:") && "stepSlug" in e ? `${e.type} ${e.stepSlug}` : e.type;
 * }
 * ```
 */
export type RunEvent<F extends FlowCarrier = never> = RunLevelEvent<F> | StepEvent<F>;

/**
 * One run as `client.listRuns` returns it (`pgflow.list_runs`): no input, output or steps; read
 * those with `client.getRun`.
 *
 * @example
 * ```ts
 * import type { RunSummary } from "@pgflow/shared";
 *
 * const ended = (r: RunSummary) => r.completedAt ?? r.failedAt ?? r.cancelledAt;
 * ```
 */
export interface RunSummary {
  /** The run's id. */
  readonly runId: string;
  /** The flow it runs. */
  readonly flowSlug: string;
  /** Its status. */
  readonly status: RunStatus;
  /** When it started (UTC, microseconds). */
  readonly startedAt: string;
  /** When it completed, else `null`. */
  readonly completedAt: string | null;
  /** When it failed, else `null`. */
  readonly failedAt: string | null;
  /** When it was cancelled, else `null`. */
  readonly cancelledAt: string | null;
  /** The run it retries or resumes, else `null`. */
  readonly restartOfRunId: string | null;
  /** `retry` or `resume` when it was started from another run, else `null`. */
  readonly restartMode: RestartMode | null;
  /** The alias it was started through (`startFlow("thread_triage", …)`), else `null`. */
  readonly startedAs: string | null;
  /** Why it failed, else `null`. */
  readonly error: string | null;
  /** The runs made from this one by `retry` or `resume`, newest first (at most 20). */
  readonly restarts: readonly RunRestart[];
}

/**
 * What `run.cancel()` did: `cancelled` is `true` when this call cancelled the run, `false` when it
 * was terminal already (`status` says how it ended, `cancelled` included: cancelling twice is
 * harmless).
 *
 * @example
 * ```ts
 * import type { CancelResult } from "@pgflow/shared";
 *
 * const say = (r: CancelResult) => r.cancelled ? "cancelled" : `already ${r.status}`;
 * ```
 */
export interface CancelResult {
  /** The run's id. */
  readonly runId: string;
  /** The flow it runs. */
  readonly flowSlug: string;
  /** Its status after the call: `cancelled`, or the terminal status it had already. */
  readonly status: RunStatus;
  /** Whether this call cancelled it. */
  readonly cancelled: boolean;
}
