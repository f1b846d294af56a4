import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";

/**
 * The identity of one attempt of a task, as the claim returned it: what a report names. The
 * attempt makes a late report harmless once the task was claimed again (SQL ignores it). Not the
 * client's `TaskAttempt`, which is a row of a task's attempt history.
 */
export interface AttemptIdentity {
  readonly runId: string;
  /** The task's flow, when known (it decides nothing in SQL; see `Completer.setReader`). */
  readonly flowSlug?: string;
  readonly stepSlug: string;
  readonly taskIndex: number;
  /** The attempt the claim started (1-based). */
  readonly attempt: number;
}

/** Completions as `pgflow.complete_tasks` and `pgflow.complete_and_claim` take them: one entry each. */
export interface CompletionArrays {
  readonly runIds: readonly string[];
  readonly stepSlugs: readonly string[];
  readonly taskIndexes: readonly number[];
  /** Each output's exact JSON text. */
  readonly outputs: readonly string[];
  readonly attempts: readonly number[];
}

/** The arrays of `completions`, in order. */
export function completionArrays(
  completions: readonly { readonly task: AttemptIdentity; readonly output: string }[],
): CompletionArrays {
  return {
    runIds: completions.map((c) => c.task.runId),
    stepSlugs: completions.map((c) => c.task.stepSlug),
    taskIndexes: completions.map((c) => c.task.taskIndex),
    outputs: completions.map((c) => c.output),
    attempts: completions.map((c) => c.task.attempt),
  };
}

/**
 * `pgflow.complete_tasks`: every completion in one call and one transaction; late or duplicate
 * ones change nothing. Outputs travel as JSON text cast `::text[]::jsonb[]`, so each stays exactly
 * what the handler returned: a parameter typed jsonb would be JSON-encoded again by postgres.js,
 * and a JS `null` would become SQL NULL instead of JSON `null`.
 */
export async function completeTasks(
  sql: Sql,
  completions: CompletionArrays,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  const a = completions;
  await bounded(
    sql`select count(*) from pgflow.complete_tasks(
      ${a.runIds as string[]}::uuid[],
      ${a.stepSlugs as string[]}::text[],
      ${a.taskIndexes as number[]}::integer[],
      ${a.outputs as string[]}::text[]::jsonb[],
      ${a.attempts as number[]}::integer[])`,
    "complete_tasks",
    timeoutMs,
  );
}

/**
 * What `fail_task` did with a failed attempt: `retried` (the task is queued again), `failed` (that
 * was its last attempt, or no retry could be delivered), or `ignored` (a late report: the attempt
 * was already settled, e.g. by stalled recovery, or the run is over).
 */
export type FailOutcome = "retried" | "failed" | "ignored";

/**
 * An attempt that ends without counting toward `maxAttempts`: `deferred` (the handler threw
 * `RetryAfter`: retried after `retryDelay` seconds) or `interrupted` (its worker shut down under
 * it: retried at once). SQL bounds how many of each one task may have (`pgflow._max_uncounted`).
 */
export interface UncountedEnd {
  readonly outcome: "deferred" | "interrupted";
  /** Whole seconds before the retry. */
  readonly retryDelay: number;
}

/**
 * `pgflow.fail_task`: SQL decides between a retry and exhaustion, and says which it was. `stack`
 * (the error's stack trace) goes to the attempt's history row; SQL keeps 4,000 characters of it.
 * With `failRun` the run fails at once with `message` (no retry, no `whenExhausted`): for a run
 * input that failed its schema, which no retry can change. With `uncounted` the attempt does not
 * count toward `maxAttempts` (see {@link UncountedEnd}); SQL answers `queued` for it too.
 */
export async function failTask(
  sql: Sql,
  task: AttemptIdentity,
  message: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
  stack?: string,
  failRun = false,
  uncounted?: UncountedEnd,
): Promise<FailOutcome> {
  const storedStack = stack?.slice(0, 4_000) ?? null;
  // Only a failing run names fail_run, only an uncounted end its outcome: the everyday call stays
  // the statement it always was.
  const query = uncounted !== undefined
    ? sql<{ status: string }[]>`
      select status from pgflow.fail_task(${task.runId}::uuid, ${task.stepSlug},
                                          ${task.taskIndex}::integer, ${message},
                                          ${task.attempt}::integer, ${storedStack}::text,
                                          outcome => ${uncounted.outcome}::text,
                                          retry_delay => ${uncounted.retryDelay}::integer)`
    : failRun
    ? sql<{ status: string }[]>`
      select status from pgflow.fail_task(${task.runId}::uuid, ${task.stepSlug},
                                          ${task.taskIndex}::integer, ${message},
                                          ${task.attempt}::integer, ${storedStack}::text,
                                          fail_run => true)`
    : sql<{ status: string }[]>`
      select status from pgflow.fail_task(${task.runId}::uuid, ${task.stepSlug},
                                          ${task.taskIndex}::integer, ${message},
                                          ${task.attempt}::integer,
                                          ${storedStack}::text)`;
  const rows = await bounded(query, "fail_task", timeoutMs);
  if (rows.length === 0) return "ignored";
  return rows[0].status === "queued" ? "retried" : "failed";
}

/**
 * Whether a failed completion says the output itself cannot be stored, so no retry can succeed: a
 * Postgres data exception (SQLSTATE class 22, e.g. 22P05 for a string with U+0000, which jsonb
 * refuses) or a program limit (54000, e.g. a jsonb past its size limit). A connection error, a
 * timeout or a lock conflict is not: those are retried.
 */
export function isUnstorableOutput(error: unknown): boolean {
  const e = error as { name?: unknown; code?: unknown } | null;
  return e?.name === "PostgresError" && typeof e.code === "string" &&
    (/^22[0-9A-Z]{3}$/.test(e.code) || e.code === "54000");
}

/**
 * The error `fail_task` records when the output cannot be stored: the SQLSTATE, Postgres's
 * message and detail (never its context line, which quotes the output), within the 2,000
 * characters `fail_task` keeps of an error.
 */
export function unstorableOutputMessage(error: unknown): string {
  const e = error as { code?: string; message?: string; detail?: string };
  const detail = e.detail ? `: ${e.detail}` : "";
  const text = `output could not be stored (SQLSTATE ${e.code}): ${e.message}${detail}; ` +
    "return JSON that Postgres jsonb accepts (no U+0000 in strings, under 255 MB)";
  return text.replaceAll("\0", "\uFFFD").slice(0, 2_000);
}
