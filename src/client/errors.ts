/**
 * The errors of the client: a run that failed or was cancelled, a wait that timed out, a run that
 * does not exist or is of another flow, a start or an action on a run that was refused, a client
 * that was closed, and a bad option.
 *
 * @module
 */
import type { RunStatus, TaskAttempt } from "./types.ts";
import { formatIssues, type InputIssue } from "../dsl/input_schema.ts";

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
 * non-array), with that step's attempt history.
 *
 * @example
 * ```ts
 * import { RunFailedError } from "@pgflow/shared";
 *
 * function explain(e: unknown): string {
 *   if (!(e instanceof RunFailedError)) return String(e);
 *   const tries = e.attempts.map((a) => `#${a.attempt} ${a.outcome}`).join(", ");
 *   return `${e.stepSlug}: ${e.stepError} (${tries})`;
 * }
 * ```
 */
export class RunFailedError extends RunError {
  /** The step that failed, or `null` when the run failed without one. */
  readonly stepSlug: string | null;
  /** That step's error (else the run's). */
  readonly stepError: string;
  /**
   * That step's attempts that ended other than by completing (worker, times, outcome, error and
   * stack), in (task, attempt) order; empty when the run failed without a failing step.
   */
  readonly attempts: readonly TaskAttempt[];

  /** Run `runId` failed at step `stepSlug` with `stepError`, after `attempts`. */
  constructor(
    runId: string,
    stepSlug: string | null,
    stepError: string,
    attempts: readonly TaskAttempt[] = [],
  ) {
    super(
      `run ${runId} failed${stepSlug === null ? "" : ` at step ${stepSlug}`}: ${stepError}`,
      runId,
      "failed",
    );
    this.name = "RunFailedError";
    this.stepSlug = stepSlug;
    this.stepError = stepError;
    this.attempts = attempts;
  }
}

/**
 * The run was cancelled (`run.cancel()`, `pgflow.cancel_run`, `pgflow runs cancel`):
 * `waitFor("completed")` and `waitFor("failed")` reject with it, since the run will never be
 * either.
 *
 * @example
 * ```ts
 * import { RunCancelledError } from "@pgflow/shared";
 *
 * function explain(e: unknown): string {
 *   return e instanceof RunCancelledError
 *     ? `cancelled at ${e.cancelledAt}: ${e.reason ?? "no reason given"}`
 *     : String(e);
 * }
 * ```
 */
export class RunCancelledError extends RunError {
  /** The reason given when it was cancelled, else `null`. */
  readonly reason: string | null;
  /** When it was cancelled (UTC, microseconds), when known. */
  readonly cancelledAt: string | null;

  /** Run `runId` was cancelled at `cancelledAt` for `reason`. */
  constructor(runId: string, reason: string | null, cancelledAt: string | null) {
    super(
      `run ${runId} was cancelled${cancelledAt === null ? "" : ` at ${cancelledAt}`}` +
        (reason === null ? " (no reason given)" : `: ${reason}`),
      runId,
      "cancelled",
    );
    this.name = "RunCancelledError";
    this.reason = reason;
    this.cancelledAt = cancelledAt;
  }
}

/**
 * The database refused to cancel, retry or resume a run: a run that is not failed or cancelled
 * cannot be retried or resumed (`code` `55000`, `status` says what it is), and a role without the
 * privilege gets `42501`. An unknown run is a `RunNotFoundError` instead.
 *
 * @example
 * ```ts
 * import { RunActionError } from "@pgflow/shared";
 *
 * const stillRunning = (e: unknown) =>
 *   e instanceof RunActionError && e.action === "retry" && e.status === "started";
 * ```
 */
export class RunActionError extends RunError {
  /** What was asked. */
  readonly action: "cancel" | "retry" | "resume";
  /** The SQLSTATE the database answered with (`55000`: the run's status does not allow it). */
  readonly code: string | undefined;

  /** `action` of run `runId` (last seen `status`) was refused with `message`. */
  constructor(
    action: "cancel" | "retry" | "resume",
    runId: string,
    status: RunStatus | null,
    message: string,
    code?: string,
    options?: ErrorOptions,
  ) {
    super(`cannot ${action} run ${runId}: ${message}`, runId, status);
    if (options?.cause !== undefined) this.cause = options.cause;
    this.name = "RunActionError";
    this.action = action;
    this.code = code;
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

/**
 * The input failed the flow's input schema (`new Flow({ slug, input: schema })`), so no run was
 * started. The message and {@link InputValidationError.issues} hold the schema's messages and
 * paths only, never the input's values. A `StartFlowError`, so code that catches those catches
 * this too.
 *
 * @example
 * ```ts
 * import { InputValidationError } from "@pgflow/shared";
 *
 * function explain(e: unknown): string[] {
 *   if (!(e instanceof InputValidationError)) return [];
 *   return e.issues.map((issue) => `${issue.path.join(".")}: ${issue.message}`);
 * }
 * ```
 */
export class InputValidationError extends StartFlowError {
  /** The issues the schema found: each one's message and path (keys from the input's root). */
  readonly issues: readonly InputIssue[];
  /** In a bulk start (`startFlows`), the index of the input that failed; else `undefined`. */
  readonly index: number | undefined;

  /**
   * Starting `flowSlug` was refused: its input (`inputs[index]` in a bulk start) failed the
   * schema with `issues`.
   */
  constructor(flowSlug: string, issues: readonly InputIssue[], index?: number) {
    const summary = formatIssues(issues);
    super(
      flowSlug,
      `${index === undefined ? "input" : `inputs[${index}]`} failed its schema: ${summary}`,
    );
    this.name = "InputValidationError";
    this.issues = issues;
    this.index = index;
  }
}

/**
 * A handle made with `client.run(runId, flowSlug)` names another flow than the run's own: reading
 * it (`waitFor`, `state`, `events`) rejects with this instead of handing on one flow's output typed
 * as another's.
 *
 * @example
 * ```ts
 * import { RunFlowMismatchError } from "@pgflow/shared";
 *
 * const wrongFlow = (e: unknown) => e instanceof RunFlowMismatchError && e.flowSlug === "greet_v1";
 * ```
 */
export class RunFlowMismatchError extends RunError {
  /** The flow the run really runs. */
  readonly flowSlug: string;
  /** The flow the handle was made for. */
  readonly expectedFlowSlug: string;

  /** Run `runId` is a run of `flowSlug`, not of `expectedFlowSlug`. */
  constructor(runId: string, status: RunStatus, flowSlug: string, expectedFlowSlug: string) {
    super(
      `run ${runId} is a run of flow ${flowSlug}, not ${expectedFlowSlug}; pass ` +
        `client.run(runId, "${flowSlug}"), or no slug`,
      runId,
      status,
    );
    this.name = "RunFlowMismatchError";
    this.flowSlug = flowSlug;
    this.expectedFlowSlug = expectedFlowSlug;
  }
}

/**
 * The client can no longer reach the database: `client.close()` was called (`reason`
 * `"closed"`), or the postgres.js pool it was given has been ended (`sql.end()`, reason
 * `"pool_ended"`). Pending and later `waitFor`, `state`, `getRun` and `startFlow` calls reject with
 * it; an `events()` iteration ends quietly on `close()` and throws it when the pool ended.
 *
 * @example
 * ```ts
 * import { ClientClosedError } from "@pgflow/shared";
 *
 * const shuttingDown = (e: unknown) => e instanceof ClientClosedError && e.reason === "closed";
 * ```
 */
export class ClientClosedError extends Error {
  /** `closed`: `client.close()` was called; `pool_ended`: the pool given as `sql` was ended. */
  readonly reason: "closed" | "pool_ended";
  /** The run that was waited for or read, or `null` (a start, or no run in particular). */
  readonly runId: string | null;

  /** `action` (say, `waitFor on run …`) cannot go on for `reason`. */
  constructor(
    reason: "closed" | "pool_ended",
    action: string,
    runId: string | null = null,
    options?: ErrorOptions,
  ) {
    super(
      reason === "closed"
        ? `${action}: the client was closed (client.close()); runs go on: read them with a new ` +
          `client`
        : `${action}: the postgres.js pool given to createClient has ended (sql.end() was ` +
          `called); close the client before ending its pool, or make a new client`,
      options,
    );
    this.name = "ClientClosedError";
    this.reason = reason;
    this.runId = runId;
  }
}

/**
 * An option of the client is invalid: thrown by `createClient`, and the rejection of `waitFor` or
 * `events` given bad options. The message names the call, the option, the value (never a
 * connection string or a pool) and what is accepted.
 *
 * @example
 * ```ts
 * import { ClientConfigError, createClient } from "@pgflow/shared";
 *
 * try {
 *   createClient({ connectionString: "postgres://postgres@127.0.0.1:5432/postgres", pollIntervalMs: 0 });
 * } catch (e) {
 *   // "createClient: pollIntervalMs must be an integer from 10 to 60000, got 0"
 *   if (e instanceof ClientConfigError) console.log(e.message);
 * }
 * ```
 */
export class ClientConfigError extends Error {
  /** Creates the error with a message that names the option, the value and the fix. */
  constructor(message: string) {
    super(message);
    this.name = "ClientConfigError";
  }
}
