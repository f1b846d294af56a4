import type { Sql } from "../platform/types.ts";
import type { PgmqMessageRecord } from "../claim/message.ts";
import type { ClaimedTask } from "../claim/claim.ts";
import type { LogFields, Logger } from "../platform/logger.ts";
import type { ActivityLog } from "../platform/activity.ts";
import { retry } from "../util/backoff.ts";
import { buildContext, type ContextResources } from "./context.ts";
import type { HandlerRegistry } from "./registry.ts";
import type { CompletionBatcher } from "./completions.ts";
import {
  completeTask,
  databaseErrorText,
  errorFields,
  errorMessage,
  type FailOutcome,
  failTask,
  isUnstorableOutput,
  outputJson,
  unstorableOutputMessage,
} from "./report.ts";

/** What running one task needs. */
export interface ExecuteDeps {
  /** The worker's pool (for complete/fail). */
  readonly sql: Sql;
  /** The queue the task was claimed on. */
  readonly queue: string;
  /** Handlers by (flow, step). */
  readonly registry: HandlerRegistry;
  /** Shared context resources. */
  readonly resources: ContextResources;
  /** Logger already carrying worker and queue. */
  readonly log: Logger;
  /** Attempts for complete/fail calls before the task is left to stalled recovery. */
  readonly reportAttempts: number;
  /** Bound of each complete/fail call (see `bounded`). */
  readonly queryTimeoutMs?: number;
  /** Sends completions several per call under load; without it each is its own call. */
  readonly completions?: CompletionBatcher;
  /** Counts outcomes for the interval's summary line; without it nothing is counted. */
  readonly activity?: ActivityLog;
}

/**
 * Runs one claimed task: handler(input, context), then `complete_task` with the exact output or
 * `fail_task` with the error's message; `handlerDone` is called between the two. Report calls are retried with backoff; if they still fail
 * the task stays started and stalled recovery takes it back (never a second run from here).
 *
 * Logs: every line carries the task's identity (run id included). A completed task is a `debug`
 * line (the interval's summary counts it at `info`); a failed attempt is `warn` when it will be
 * retried and `error` when it was the last, with the error's message (never input or output).
 */
export async function executeTask(
  deps: ExecuteDeps,
  task: ClaimedTask,
  message: PgmqMessageRecord,
  handlerDone: () => void = () => {},
): Promise<void> {
  const log = deps.log.with({
    runId: task.runId,
    messageId: task.messageId,
    flow: task.flowSlug,
    step: task.stepSlug,
    taskIndex: task.taskIndex,
    attempt: task.attempt,
  });
  const started = performance.now();
  let report: { kind: "complete"; output: string } | { kind: "fail"; error: string };
  // What the "task failed" line says about the error (see errorFields).
  let failFields: LogFields = {};
  const registered = deps.registry.get(task.flowSlug, task.stepSlug);
  if (registered === undefined) {
    // The support set only names pairs with handlers, so this means the support set is wrong.
    report = { kind: "fail", error: `worker has no handler for ${task.flowSlug}.${task.stepSlug}` };
    failFields = { error: report.error };
  } else {
    const { step } = registered;
    if (step.kind !== "map" && step.dependencies.length === 0) {
      // A root non-map task's input is the run input: later steps of the run need no query.
      deps.resources.flowInputs.seed(task.runId, task.input);
    }
    log.debug("task started");
    try {
      const context = buildContext(deps.resources, deps.queue, task, message);
      const output = await registered.handler(task.input, context);
      if (step.kind === "array" && !Array.isArray(output)) {
        // .array() promises an array to the map that consumes it; say so at the source.
        throw new Error(
          `array step ${task.flowSlug}.${task.stepSlug} returned ${
            output === null ? "null" : typeof output
          }, not an array`,
        );
      }
      report = {
        kind: "complete",
        output: outputJson(output, `${task.flowSlug}.${task.stepSlug}`),
      };
    } catch (error) {
      report = { kind: "fail", error: errorMessage(error) };
      failFields = errorFields(error);
    }
  }
  const ms = Math.round(performance.now() - started);
  // The handler's slot is free for the next task; the report below still counts as in flight.
  handlerDone();
  let failOutcome = "failed" as FailOutcome;
  const send = async (r: typeof report) => {
    await retry(
      async () => {
        if (r.kind === "complete") {
          await (deps.completions?.complete(task, r.output) ??
            completeTask(deps.sql, task, r.output, deps.queryTimeoutMs));
        } else {
          failOutcome = await failTask(deps.sql, task, r.error, deps.queryTimeoutMs);
        }
      },
      {
        attempts: deps.reportAttempts,
        // An output Postgres refuses is refused again: no retry, the attempt fails (below).
        retryable: (error) => r.kind !== "complete" || !isUnstorableOutput(error),
        onRetry: (error, attempt, delayMs) =>
          log.warn(`${r.kind}_task failed; retrying`, {
            error: databaseErrorText(error),
            retry: attempt,
            delayMs,
          }),
      },
    );
  };
  try {
    try {
      await send(report);
    } catch (error) {
      if (report.kind !== "complete" || !isUnstorableOutput(error)) throw error;
      // The output cannot be stored (e.g. a string with U+0000): fail the attempt with that cause
      // now, rather than leave the task started for stalled recovery to fail as "stalled".
      const code = (error as { code: string }).code;
      log.warn("output could not be stored", { code });
      report = { kind: "fail", error: unstorableOutputMessage(error) };
      failFields = { errorKind: "unstorable output", errorCode: code, error: report.error };
      await send(report);
    }
  } catch (error) {
    log.error(`${report.kind}_task failed; stalled recovery will take the task back`, {
      error: databaseErrorText(error),
    });
    return;
  }
  if (report.kind === "complete") {
    deps.activity?.task("completed", ms);
    log.debug("task completed", { ms });
    return;
  }
  // One event name for every failed attempt; the level and `outcome` say what happens next. The
  // whole error text is in step_tasks.error_message; the line has its first line and kind.
  const fields = { ms, outcome: failOutcome, ...failFields };
  if (failOutcome === "retried") {
    deps.activity?.task("retried", ms);
    log.warn("task failed", fields);
  } else if (failOutcome === "failed") {
    deps.activity?.task("failed", ms);
    log.error("task failed", fields);
  } else {
    // A late report (the attempt was already settled): nothing changed, nothing to count.
    log.warn("task failed", fields);
  }
}
