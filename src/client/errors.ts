/**
 * The errors of the client: a run that failed, a wait that timed out, a run that does not exist,
 * and a start that was refused.
 *
 * @module
 */
import type { RunStatus } from "./types.ts";

/**
 * Base class of the client's run errors: names the run and the status it was last seen in.
 *
 * @example
 * ```ts
 * import { RunError } from "@pgflow/shared";
 *
 * try {
 *   // await run.waitFor("completed");
 * } catch (e) {
 *   if (e instanceof RunError) console.log(e.runId, e.status);
 * }
 * ```
 */
export class RunError extends Error {
  /** The run's id. */
  readonly runId: string;
  /** Its status when the error was raised (`null`: the run was never seen). */
  readonly status: RunStatus | null;

  /** An error about run `runId`, last seen with `status`. */
  constructor(message: string, runId: string, status: RunStatus | null) {
    super(message);
    this.name = "RunError";
    this.runId = runId;
    this.status = status;
  }
}

/**
 * The run failed: `waitFor("completed")` rejects with it. Names the failing step and its error
 * when a step failed (a condition with `whenUnmet: 'fail'`, exhausted retries, a map over a
 * non-array).
 *
 * @example
 * ```ts
 * import { RunFailedError } from "@pgflow/shared";
 *
 * function explain(e: unknown): string {
 *   return e instanceof RunFailedError ? `${e.stepSlug}: ${e.stepError}` : String(e);
 * }
 * ```
 */
export class RunFailedError extends RunError {
  /** The step that failed, or `null` when the run failed without one. */
  readonly stepSlug: string | null;
  /** That step's error (else the run's). */
  readonly stepError: string;

  /** Run `runId` failed at step `stepSlug` with `stepError`. */
  constructor(runId: string, stepSlug: string | null, stepError: string) {
    super(
      `run ${runId} failed${stepSlug === null ? "" : ` at step ${stepSlug}`}: ${stepError}`,
      runId,
      "failed",
    );
    this.name = "RunFailedError";
    this.stepSlug = stepSlug;
    this.stepError = stepError;
  }
}

/**
 * The run did not reach the awaited status within `timeoutMs`. The run goes on; wait again or
 * read it with `getRun`.
 *
 * @example
 * ```ts
 * import { RunTimeoutError } from "@pgflow/shared";
 *
 * const late = (e: unknown) => e instanceof RunTimeoutError && e.status === "started";
 * ```
 */
export class RunTimeoutError extends RunError {
  /** The status that was awaited. */
  readonly awaited: string;
  /** How long was waited. */
  readonly timeoutMs: number;

  /** Run `runId` was still `status` after `timeoutMs`. */
  constructor(runId: string, status: RunStatus | null, awaited: string, timeoutMs: number) {
    super(
      `run ${runId} is still ${status ?? "not visible"} after ${timeoutMs} ms of waiting for ` +
        `${awaited}; it goes on: wait again, or read it with client.getRun`,
      runId,
      status,
    );
    this.name = "RunTimeoutError";
    this.awaited = awaited;
    this.timeoutMs = timeoutMs;
  }
}

/**
 * The run does not exist (or the client's role may not read it).
 *
 * @example
 * ```ts
 * import { RunNotFoundError } from "@pgflow/shared";
 *
 * const missing = (e: unknown) => e instanceof RunNotFoundError;
 * ```
 */
export class RunNotFoundError extends RunError {
  /** Run `runId` was not found. */
  constructor(runId: string) {
    super(
      `run ${runId} does not exist, or this client's role may not read it (pgflow.get_run ` +
        `returned nothing)`,
      runId,
      null,
    );
    this.name = "RunNotFoundError";
  }
}

/**
 * The run ended in the other terminal status than the one awaited (`waitFor("failed")` on a run
 * that completed).
 *
 * @example
 * ```ts
 * import { RunStatusError } from "@pgflow/shared";
 *
 * const completedInstead = (e: unknown) => e instanceof RunStatusError && e.status === "completed";
 * ```
 */
export class RunStatusError extends RunError {
  /** Run `runId` ended `status`, not `awaited`. */
  constructor(runId: string, status: RunStatus, awaited: string) {
    super(`run ${runId} ${status}, so it will never be ${awaited}`, runId, status);
    this.name = "RunStatusError";
  }
}

/**
 * Starting a run was refused: an unknown flow, bad input, or a `runId` already used by a run of
 * another flow.
 *
 * @example
 * ```ts
 * import { StartFlowError } from "@pgflow/shared";
 *
 * const refused = (e: unknown) => e instanceof StartFlowError && e.flowSlug === "thread_triage_v1";
 * ```
 */
export class StartFlowError extends Error {
  /** The flow that was to be started. */
  readonly flowSlug: string;
  /** The SQLSTATE the database answered with, when it refused (`22023`: unknown flow). */
  readonly code: string | undefined;

  /** Starting `flowSlug` failed with `message`. */
  constructor(flowSlug: string, message: string, code?: string, options?: ErrorOptions) {
    super(`cannot start flow ${flowSlug}: ${message}`, options);
    this.name = "StartFlowError";
    this.flowSlug = flowSlug;
    this.code = code;
  }
}
