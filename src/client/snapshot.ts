/**
 * The document `pgflow.get_run` returns, and its translation into a {@link RunState}.
 *
 * @module
 */
import type {
  AttemptOutcome,
  RestartMode,
  RunRestart,
  RunState,
  RunStatus,
  RunSummary,
  StepState,
  StepStatus,
  StepWait,
  TaskAttempt,
  WaitingTasks,
} from "./types.ts";
import { parseJsonb } from "../util/json_parse.ts";

/** One attempt as `pgflow.get_run` lists it under a step. */
export interface RawAttempt {
  readonly task_index: number;
  readonly attempt: number;
  readonly worker_id: string | null;
  readonly started_at: string | null;
  readonly ended_at: string | null;
  readonly outcome: AttemptOutcome;
  readonly error_message: string | null;
  readonly error_stack: string | null;
}

/** One of the runs made from a run, as `pgflow.get_run` and `list_runs` list them. */
export interface RawRestart {
  readonly run_id: string;
  readonly restart_mode: RestartMode;
  readonly status: RunStatus;
  readonly started_at: string;
}

/** Tasks waiting for capacity under one (scope, key), as `pgflow.get_run` lists them. */
export interface RawWaiting {
  readonly limit_scope: string;
  readonly limit_key: string;
  readonly tasks: number;
  readonly since: string;
  readonly in_flight: number;
  readonly max_running: number | null;
  readonly reason: string;
}

/** One step as `pgflow.get_run` returns it (snake_case, as stored). */
export interface RawStep {
  readonly step_slug: string;
  readonly step_index: number;
  readonly step_type: "single" | "map";
  readonly status: StepStatus;
  readonly output: unknown;
  readonly error_message: string | null;
  readonly skip_reason: string | null;
  readonly initial_tasks: number | null;
  readonly remaining_tasks: number | null;
  readonly started_at: string | null;
  readonly completed_at: string | null;
  readonly failed_at: string | null;
  readonly skipped_at: string | null;
  // Absent from an engine older than the run operations (issue 30): read as null, false, [].
  readonly cancelled_at?: string | null;
  readonly reused?: boolean;
  readonly attempts?: readonly RawAttempt[] | null;
  // Absent from an engine older than flow control (issue 43): read as [].
  readonly waiting?: readonly RawWaiting[] | null;
  // Only a child-flow step has them.
  readonly child_flow?: string;
  readonly children?: readonly RawChild[];
  // Absent from an engine older than waiting steps (issue 44): read as no wait.
  readonly kind?: string;
  readonly waiting_for?: string | null;
  readonly wait_key?: string | null;
  readonly wait_until?: string | null;
}

/** A child run as get_run lists it under its parent's step. */
interface RawChild {
  readonly task_index: number;
  readonly run_id: string;
  readonly status: RunStatus | null;
}

/** The run as `pgflow.get_run` returns it. */
export interface RawRun {
  readonly run_id: string;
  readonly flow_slug: string;
  readonly status: RunStatus;
  readonly input: unknown;
  readonly output: unknown;
  readonly error_message: string | null;
  readonly remaining_steps: number;
  readonly started_at: string;
  readonly completed_at: string | null;
  readonly failed_at: string | null;
  readonly cancelled_at?: string | null;
  readonly cancel_reason?: string | null;
  readonly restart_of_run_id?: string | null;
  readonly restart_mode?: RestartMode | null;
  readonly started_as?: string | null;
  // Absent from an engine older than restart lineage (issue 41): read as [].
  readonly restarts?: readonly RawRestart[] | null;
  // Only a child run has it.
  readonly parent?: {
    readonly run_id: string;
    readonly step_slug: string;
    readonly task_index: number;
  };
  readonly steps: readonly RawStep[];
}

/** One run as `pgflow.list_runs` returns it. */
export interface RawSummary {
  readonly run_id: string;
  readonly flow_slug: string;
  readonly status: RunStatus;
  readonly started_at: string;
  readonly completed_at: string | null;
  readonly failed_at: string | null;
  readonly cancelled_at: string | null;
  readonly restart_of_run_id: string | null;
  readonly restart_mode: RestartMode | null;
  readonly started_as?: string | null;
  readonly error_message: string | null;
  readonly restarts?: readonly RawRestart[] | null;
}

/** A run state of any flow: the client's internal, untyped view. */
export type AnyRunState = RunState<never>;

/**
 * Translates `pgflow.get_run`'s document into a run state. The backends hand over its text, which
 * `parseJsonb` reads: inputs and outputs with their keys as stored and their numbers exact (see
 * `ExactNumber`), never through `JSON.parse` alone.
 */
export function toRunState(raw: unknown): AnyRunState | null {
  if (raw === null || raw === undefined) return null;
  const run = (typeof raw === "string" ? parseJsonb(raw) : raw) as RawRun | null;
  if (run === null) return null;
  if (typeof run !== "object" || typeof run.run_id !== "string" || !Array.isArray(run.steps)) {
    throw new Error(`pgflow.get_run returned something that is not a run: ${typeof run}`);
  }
  return {
    runId: run.run_id,
    flowSlug: run.flow_slug,
    status: run.status,
    input: run.input as AnyRunState["input"],
    output: run.output as AnyRunState["output"],
    error: run.error_message,
    remainingSteps: run.remaining_steps,
    startedAt: run.started_at,
    completedAt: run.completed_at,
    failedAt: run.failed_at,
    cancelledAt: run.cancelled_at ?? null,
    cancelReason: run.cancel_reason ?? null,
    restartOfRunId: run.restart_of_run_id ?? null,
    restartMode: run.restart_mode ?? null,
    startedAs: run.started_as ?? null,
    restarts: (run.restarts ?? []).map(toRestart),
    parent: run.parent === undefined ? null : {
      runId: run.parent.run_id,
      stepSlug: run.parent.step_slug,
      taskIndex: run.parent.task_index,
    },
    steps: run.steps.map((s): StepState => ({
      stepSlug: s.step_slug,
      stepIndex: s.step_index,
      stepType: s.step_type,
      status: s.status,
      output: s.output as StepState["output"],
      error: s.error_message,
      skipReason: s.skip_reason,
      initialTasks: s.initial_tasks,
      remainingTasks: s.remaining_tasks,
      startedAt: s.started_at,
      completedAt: s.completed_at,
      failedAt: s.failed_at,
      skippedAt: s.skipped_at,
      cancelledAt: s.cancelled_at ?? null,
      reused: s.reused ?? false,
      attempts: (s.attempts ?? []).map(toAttempt),
      waiting: (s.waiting ?? []).map(toWaiting),
      childFlow: s.child_flow ?? null,
      children: (s.children ?? []).map((c: RawChild) => ({
        taskIndex: c.task_index,
        runId: c.run_id,
        status: c.status,
      })),
      wait: toWait(s),
    })),
  };
}

function toWait(s: RawStep): StepWait | null {
  if (s.waiting_for === null || s.waiting_for === undefined) return null;
  return {
    kind: s.kind === "sleep" ? "sleep" : "event",
    event: s.waiting_for === "" ? null : s.waiting_for,
    key: s.wait_key ?? null,
    since: s.started_at,
    until: s.wait_until ?? null,
  };
}

function toRestart(r: RawRestart): RunRestart {
  return { runId: r.run_id, mode: r.restart_mode, status: r.status, startedAt: r.started_at };
}

function toAttempt(a: RawAttempt): TaskAttempt {
  return {
    taskIndex: a.task_index,
    attempt: a.attempt,
    workerId: a.worker_id,
    startedAt: a.started_at,
    endedAt: a.ended_at,
    outcome: a.outcome,
    errorMessage: a.error_message,
    errorStack: a.error_stack,
  };
}

/**
 * Translates a step's waiting tasks as `pgflow.get_run` lists them, or a row of
 * `pgflow.waiting_tasks` given the same names (the client's backends do).
 */
export function toWaiting(w: RawWaiting): WaitingTasks {
  return {
    limitScope: w.limit_scope,
    limitKey: w.limit_key,
    tasks: Number(w.tasks),
    since: w.since,
    inFlight: Number(w.in_flight),
    maxRunning: w.max_running,
    reason: w.reason,
  };
}

/** Translates one of `pgflow.list_runs`'s documents (a JSON value, or its text) into a summary. */
export function toRunSummary(raw: unknown): RunSummary {
  const r = (typeof raw === "string" ? parseJsonb(raw) : raw) as RawSummary | null;
  if (r === null || typeof r !== "object" || typeof r.run_id !== "string") {
    throw new Error(`pgflow.list_runs returned something that is not a run: ${typeof r}`);
  }
  return {
    runId: r.run_id,
    flowSlug: r.flow_slug,
    status: r.status,
    startedAt: r.started_at,
    completedAt: r.completed_at ?? null,
    failedAt: r.failed_at ?? null,
    cancelledAt: r.cancelled_at ?? null,
    restartOfRunId: r.restart_of_run_id ?? null,
    restartMode: r.restart_mode ?? null,
    startedAs: r.started_as ?? null,
    error: r.error_message ?? null,
    restarts: (r.restarts ?? []).map(toRestart),
  };
}

/** Whether a run can change no more. */
export function isTerminal(status: RunStatus): boolean {
  return status === "completed" || status === "failed" || status === "cancelled";
}

/** The step whose failure failed the run, if one did. */
export function failedStep(state: AnyRunState): StepState | undefined {
  return state.steps.find((s) => s.status === "failed");
}
