/**
 * The document `pgflow.get_run` returns, and its translation into a {@link RunState}.
 *
 * @module
 */
import type { RunState, RunStatus, StepState, StepStatus } from "./types.ts";

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
  readonly steps: readonly RawStep[];
}

/** A run state of any flow: the client's internal, untyped view. */
export type AnyRunState = RunState<never>;

/** Translates `pgflow.get_run`'s document (a JSON value, or its text) into a run state. */
export function toRunState(raw: unknown): AnyRunState | null {
  if (raw === null || raw === undefined) return null;
  const run = (typeof raw === "string" ? JSON.parse(raw) : raw) as RawRun | null;
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
    })),
  };
}

/** Whether a run can change no more. */
export function isTerminal(status: RunStatus): boolean {
  return status === "completed" || status === "failed";
}

/** The step whose failure failed the run, if one did. */
export function failedStep(state: AnyRunState): StepState | undefined {
  return state.steps.find((s) => s.status === "failed");
}
