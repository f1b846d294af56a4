import type { PgmqMessageRecord } from "../dsl/message.ts";
import type { ClaimedTask } from "./claim.ts";
import type { Completer, TaskResult } from "./completer.ts";
import type { LogFields, Logger } from "../platform/logger.ts";
import type { ActivityLog } from "../platform/activity.ts";
import { buildContext, type ContextResources } from "./context.ts";
import { checkRunInput, RunInputRejected } from "./input_check.ts";
import type { HandlerRegistry } from "./registry.ts";
import { errorFields, errorMessage, errorStack, outputJson } from "./result.ts";
import { checkOutputSize, inputTooLarge } from "./payload_size.ts";
import { settleOrTimeOut } from "./timeout_race.ts";
import type { TrackedTask } from "./cancellations.ts";
import { TaskLog } from "./task_log.ts";
import { RetryAfter } from "../dsl/retry_after.ts";
import { StepTimedOut, WorkerShutdown } from "../dsl/abort_reasons.ts";
import { startAttempt } from "../telemetry/otel_loader.ts";
import type { EndedSpanEmitter } from "../telemetry/ended_spans.ts";

/** What running one task needs. */
export interface ExecuteDeps {
  /** The queue the task was claimed on. */
  readonly queue: string;
  /** Handlers by (flow, step). */
  readonly registry: HandlerRegistry;
  /** Shared context resources. */
  readonly resources: ContextResources;
  /** Logger already carrying worker and queue. */
  readonly log: Logger;
  /** Where every result goes (the only way a task is completed or failed). */
  readonly completer: Completer;
  /** Counts outcomes for the interval's summary line; without it nothing is counted. */
  readonly activity?: ActivityLog;
  /**
   * Whether a failure's line quotes the message of an error from the flow's code (its input
   * schema, its handler); without it, only the error's kind, code and length are logged.
   */
  readonly logErrorMessages?: boolean;
  /** Largest output sent, and the bound the read applied to inputs (`PayloadTooLarge`). */
  readonly maxPayloadBytes?: number;
  /** The worker's id, on each attempt's span (docs/telemetry.md). */
  readonly workerId?: string;
  /** Emits the run's and steps' spans as they end; set only while spans are recorded. */
  readonly spans?: EndedSpanEmitter;
}

/**
 * Runs one claimed task: handler(input, context), then hands the result (the exact output, or the
 * error's text) to the completer; `handlerDone` is called between the two. For a flow with an
 * input schema, the run input is checked first (once per run): an input that fails it fails the
 * run at once, without a retry, and no handler of the run sees it. A report the completer
 * cannot make leaves the task started for stalled recovery (never a second run from here).
 *
 * Logs: every line carries the task's identity (run id included). A completed task is a `debug`
 * line (the interval's summary counts it at `info`); a failed attempt is `warn` when it will be
 * retried and `error` when it was the last, with the error's kind, code and length, and its
 * message only when the engine wrote it or `logErrorMessages` is set (never input or output).
 */
export async function executeTask(
  deps: ExecuteDeps,
  task: ClaimedTask,
  message: PgmqMessageRecord,
  handlerDone: () => void = () => {},
  tracked?: TrackedTask,
): Promise<void> {
  const signal = tracked?.signal;
  const log = new TaskLog(deps.log, task);
  const attempt = startAttempt(task, deps.queue, deps.workerId ?? "", message.enqueued_at);
  const started = performance.now();
  let result: TaskResult;
  // What the "task failed" line says about the error (see errorFields).
  let failFields: LogFields = {};
  const registered = deps.registry.get(task.flowSlug, task.stepSlug);
  if (task.inputWithheld === true) {
    // The read left it in the database: parsing it could end the isolate, on every retry.
    result = { kind: "fail", error: inputTooLarge(task, deps.maxPayloadBytes) };
    failFields = { errorKind: "PayloadTooLarge", error: result.error };
  } else if (registered === undefined) {
    // The support set only names pairs with handlers, so this means the support set is wrong.
    result = { kind: "fail", error: `worker has no handler for ${task.flowSlug}.${task.stepSlug}` };
    failFields = { error: result.error };
  } else {
    const { step } = registered;
    if (step.kind !== "map" && step.dependencies.length === 0) {
      // A root non-map task's input is the run input: later steps of the run need no query.
      deps.resources.flowInputs.seed(task.runId, task.input, task.inputBytes);
    }
    log.debug("task started");
    // Whether what is thrown comes from the flow's code (its schema, its handler), whose messages
    // may quote the data they were given; the engine's own (below) never do.
    let flowCode = true;
    try {
      if (registered.inputSchema !== undefined) {
        await checkRunInput(deps.resources.inputChecks, task.runId, registered.inputSchema);
      }
      const context = buildContext(deps.resources, deps.queue, task, message, signal);
      // The handler's own spans (fetch, queries) are children of the attempt's.
      const output = await settleOrTimeOut(
        Promise.resolve(attempt.run(() => registered.handler(task.input, context))),
        tracked,
      );
      flowCode = false;
      if (step.kind === "array" && !Array.isArray(output)) {
        // .array() promises an array to the map that consumes it; say so at the source.
        throw new Error(
          `array step ${task.flowSlug}.${task.stepSlug} returned ${
            output === null ? "null" : typeof output
          }, not an array`,
        );
      }
      result = {
        kind: "complete",
        output: checkOutputSize(
          outputJson(output, `${task.flowSlug}.${task.stepSlug}`),
          task,
          deps.maxPayloadBytes,
        ),
      };
    } catch (error) {
      result = failureOf(error, signal);
      failFields = errorFields(error);
      if (signal?.reason instanceof StepTimedOut && result.kind === "fail") {
        // The engine's own words: they name the step, the timeout and the attempt, nothing else.
        flowCode = false;
        failFields = { errorKind: "StepTimedOut", error: result.error };
      }
      if (flowCode && !deps.logErrorMessages) {
        const { error: _text, ...described } = failFields;
        failFields = described;
      }
    }
  }
  const ms = Math.round(performance.now() - started);
  // The handler's slot is free for the next task; the report below still counts as in flight.
  handlerDone();
  const receipt = await deps.completer.report(task, result, log);
  attempt.end(receipt.outcome, ms / 1000, failFields.errorKind as string | undefined);
  deps.spans?.reported(task, receipt.outcome);
  if (receipt.unstorable !== undefined) {
    log.warn("output could not be stored", { code: receipt.unstorable.code });
    failFields = {
      errorKind: "unstorable output",
      errorCode: receipt.unstorable.code,
      error: receipt.unstorable.error,
    };
  }
  switch (receipt.outcome) {
    case "unreported":
      // The completer has said so; the task stays started until stalled recovery takes it back.
      return;
    case "completed":
      deps.activity?.task("completed", ms);
      log.debug("task completed", { ms });
      return;
    case "retried":
      deps.activity?.task("retried", ms);
      if (result.kind === "fail" && result.uncounted !== undefined) {
        // Not a failure of the handler: it was told "later", or its worker is stopping.
        log.info(`task ${result.uncounted.outcome}`, {
          ms,
          retryDelay: result.uncounted.retryDelay,
          ...failFields,
        });
        return;
      }
      log.warn("task failed", { ms, outcome: receipt.outcome, ...failFields });
      return;
    case "failed":
      deps.activity?.task("failed", ms);
      log.error("task failed", { ms, outcome: receipt.outcome, ...failFields });
      return;
    case "ignored":
      // A late report (the attempt was already settled): nothing changed, nothing to count.
      log.warn("task failed", { ms, outcome: receipt.outcome, ...failFields });
      return;
  }
}

/**
 * What a handler's error makes of its attempt: a `RetryAfter` defers it (it does not count), an
 * error after its worker began to shut down interrupts it (it does not count either), an error
 * after its step's timeout fails it with the timeout as the reason; any other fails it.
 */
function failureOf(error: unknown, signal: AbortSignal | undefined): TaskResult {
  if (error instanceof RunInputRejected) {
    return { kind: "fail", error: errorMessage(error), failRun: true };
  }
  if (error instanceof RetryAfter) {
    return {
      kind: "fail",
      error: errorMessage(error),
      uncounted: { outcome: "deferred", retryDelay: error.delaySeconds },
    };
  }
  const reason: unknown = signal?.aborted ? signal.reason : undefined;
  if (reason instanceof StepTimedOut) {
    return { kind: "fail", error: reason.message, stack: errorStack(error) };
  }
  if (reason instanceof WorkerShutdown) {
    return {
      kind: "fail",
      error: error === reason
        ? reason.message
        : `${reason.message}; the handler ended with: ${errorMessage(error)}`,
      stack: errorStack(error),
      uncounted: { outcome: "interrupted", retryDelay: 0 },
    };
  }
  return { kind: "fail", error: errorMessage(error), stack: errorStack(error) };
}
