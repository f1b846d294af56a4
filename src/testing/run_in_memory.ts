/**
 * `runFlowInMemory`: a flow's handlers run for one input without a database, with the input and
 * context the worker builds (src/task/), and the run's progress as the engine's SQL makes it
 * (./run_progress.ts).
 *
 * @module
 */
import type { Json } from "../dsl/json.ts";
import type { AnyStepHandler, StepDefinition } from "../dsl/types.ts";
import type { Env, PgmqMessageRecord } from "../dsl/context.ts";
import type {
  AnyFlow,
  ExtractFlowContext,
  ExtractHandlerContext,
  FlowCarrier,
} from "../dsl/extract.ts";
import type { FlowInputOf, FlowOutputOf, RunStepOutput, RunStepSlug } from "../client/types.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import { extractRoutePlan } from "../compile/shape.ts";
import type { CompilableFlow } from "../compile/shape.ts";
import { buildContext } from "../task/context.ts";
import type { ClaimedTask } from "../task/claim.ts";
import { FlowInputCache } from "../task/flow_input.ts";
import { checkRunInput, RunInputChecks, RunInputRejected } from "../task/input_check.ts";
import { errorMessage, outputJson } from "../task/result.ts";
import { RetryAfter } from "../dsl/retry_after.ts";
import { jsonText } from "../util/json_write.ts";
import {
  InMemoryRun,
  type InMemoryStepStatus,
  type QueuedTask,
  type SkipReason,
} from "./run_progress.ts";
import { storedJson } from "./stored_json.ts";

/**
 * The time a run in memory sees: `now()` in milliseconds, and `sleep(ms)` until a retry or a
 * `startDelay` is due. {@link fakeClock} (the default) waits for nothing.
 *
 * @example
 * ```ts
 * import type { InMemoryClock } from "@pgflow/shared/testing";
 *
 * const realTime: InMemoryClock = {
 *   now: () => Date.now(),
 *   sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
 * };
 * ```
 */
export interface InMemoryClock {
  /** The current time in milliseconds. */
  now(): number;
  /** Resolves once `ms` milliseconds have passed on this clock. */
  sleep(ms: number): Promise<void>;
}

/**
 * A clock that starts at `start` (ms) and jumps forward when slept on: retries with their backoff
 * take no real time, and each attempt's `startedAt` says when it would have run.
 *
 * @example
 * ```ts
 * import { fakeClock } from "@pgflow/shared/testing";
 *
 * const clock = fakeClock();
 * await clock.sleep(2_000);
 * console.log(clock.now()); // 2000
 * ```
 */
export function fakeClock(start = 0): InMemoryClock {
  let now = start;
  return {
    now: () => now,
    sleep: (ms) => {
      now += Math.max(0, ms);
      return Promise.resolve();
    },
  };
}

/**
 * A handler that replaces a step's own in one run: it gets the step's input and context.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import type { HandlerOverride } from "@pgflow/shared/testing";
 *
 * const flow = new Flow<{ id: string }>({ slug: "fetch_user" })
 *   .step({ slug: "load" }, (input) => ({ id: input.id }));
 * const offline: HandlerOverride<typeof flow> = (input) => ({ id: input.id, stub: true });
 * ```
 */
export type HandlerOverride<F extends FlowCarrier> = (
  // deno-lint-ignore no-explicit-any
  input: any,
  context: ExtractHandlerContext<F>,
) => unknown;

/**
 * Options of {@link runFlowInMemory}.
 *
 * @example
 * ```ts
 * import type { RunInMemoryOptions } from "@pgflow/shared/testing";
 *
 * const options: RunInMemoryOptions = { env: { API_URL: "http://localhost" } };
 * ```
 */
export interface RunInMemoryOptions<F extends FlowCarrier = AnyFlow> {
  /** Extra values merged into every handler context, as the worker's `context` option does. */
  readonly context?: Partial<ExtractFlowContext<F>> & { readonly [key: string]: unknown };
  /** Handlers that replace the flow's own, by step slug (e.g. one that fails, or a stub). */
  readonly handlers?: { readonly [K in RunStepSlug<F>]?: HandlerOverride<F> };
  /** The clock retries and start delays wait on; {@link fakeClock} by default. */
  readonly clock?: InMemoryClock;
  /** `ctx.env`; empty by default (the worker gives `Deno.env`). */
  readonly env?: Env;
  /** `ctx.sql`: there is no database, so a handler that uses it throws unless a stub is given. */
  readonly sql?: Sql;
  /** `ctx.supabase`: throws when read unless a stub is given. */
  readonly supabase?: SupabaseClient;
  /** `ctx.signal` and `ctx.shutdownSignal`; never aborted by default. */
  readonly signal?: AbortSignal;
  /** The run id handlers see (`ctx.stepTask.run_id`); a random uuid by default. */
  readonly runId?: string;
}

/**
 * One attempt of one task, in the order they ran.
 *
 * @example
 * ```ts
 * import type { InMemoryAttempt } from "@pgflow/shared/testing";
 *
 * const retried: InMemoryAttempt = {
 *   taskIndex: 0, attempt: 1, startedAt: 0, outcome: "failed", error: "timeout", retryDelay: 1,
 * };
 * ```
 */
export interface InMemoryAttempt {
  /** The task's index (0 for a single step, the element's for a map). */
  readonly taskIndex: number;
  /** The attempt number (1-based), as `ctx.attempt`. */
  readonly attempt: number;
  /** When it started on the run's clock, in milliseconds. */
  readonly startedAt: number;
  /**
   * How it ended: `deferred` when its handler threw `RetryAfter` (the attempt does not count toward
   * `maxAttempts`, and the next one comes after the delay asked).
   */
  readonly outcome: "completed" | "failed" | "deferred";
  /** The error text the engine would store (`step_tasks.error_message`), for a failed attempt. */
  readonly error?: string;
  /**
   * Seconds until the next attempt, when the failure is retried (base_delay * 2^(n-1) for the
   * n-th counted failure) or the attempt deferred (its delay).
   */
  readonly retryDelay?: number;
}

/**
 * The end state of one step.
 *
 * @example
 * ```ts
 * import type { InMemoryStepResult } from "@pgflow/shared/testing";
 *
 * const skipped: InMemoryStepResult<string> = {
 *   status: "skipped", output: null, attempts: [], skipReason: "condition_unmet",
 * };
 * ```
 */
export interface InMemoryStepResult<TOutput = Json> {
  /** As `pgflow.step_states.status`: `created` or `started` when the run failed first. */
  readonly status: InMemoryStepStatus;
  /** Its output (as stored: JSON read back) when completed, else `null`. */
  readonly output: TOutput | null;
  /** Every attempt of its tasks. */
  readonly attempts: readonly InMemoryAttempt[];
  /** Why it was skipped, when it was. */
  readonly skipReason?: SkipReason;
  /** The error that failed it, or that exhausted it before a skip. */
  readonly error?: string;
}

/**
 * The end state of a run in memory.
 *
 * @example
 * ```ts
 * import type { InMemoryRunResult } from "@pgflow/shared/testing";
 *
 * function summary(result: InMemoryRunResult): string {
 *   return `${result.status}: ${JSON.stringify(result.output)}`;
 * }
 * ```
 */
export interface InMemoryRunResult<F extends FlowCarrier = AnyFlow> {
  /** The run's id, as handlers saw it. */
  readonly runId: string;
  /** `completed` when every step completed or was skipped, else `failed`. */
  readonly status: "completed" | "failed";
  /** The run output (completed leaf steps' outputs by slug) when completed, else `null`. */
  readonly output: FlowOutputOf<F> | null;
  /** Why the run failed, when it did. */
  readonly error?: string;
  /** Every step's end state, by slug. */
  readonly steps: { readonly [K in RunStepSlug<F>]: InMemoryStepResult<RunStepOutput<F, K>> };
}

/**
 * Runs a flow for one input in memory: no database, no queue, no worker. Each handler gets the
 * input and context a worker builds (the run input for a root step, the object of completed
 * dependency outputs for a dependent, the element for a map task; `ctx.flowInput`, `ctx.attempt`,
 * `ctx.stepTask`, `ctx.env`, the worker's `context`), and the run moves on as the engine moves it:
 * `if` / `ifNot` conditions, `whenUnmet` and `whenExhausted` skips and cascades, retries with
 * exponential backoff on a fake clock, the flow's input schema (a rejected input fails the run
 * without retries). Outputs make the round trip through JSON the worker makes: `undefined` becomes
 * `null`, a `Date` its ISO string, and a value `jsonb` cannot hold (a function, a bigint, NaN,
 * U+0000) fails the attempt as it would on a worker.
 *
 * Tasks run one at a time, in the order the engine makes them ready (a retry waits for its delay
 * on the clock while other tasks run). `ctx.sql` and `ctx.supabase` exist only when stubs are
 * given; timeouts and flow control (concurrency limits, priorities) are not simulated.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { runFlowInMemory } from "@pgflow/shared/testing";
 *
 * const flow = new Flow<{ n: number }>({ slug: "double" })
 *   .step({ slug: "twice" }, (input) => input.n * 2);
 * const result = await runFlowInMemory(flow, { n: 21 });
 * console.log(result.status, result.output); // completed { twice: 42 }
 * ```
 */
export async function runFlowInMemory<F extends FlowCarrier>(
  target: F,
  input: FlowInputOf<F>,
  options: RunInMemoryOptions<F> = {},
): Promise<InMemoryRunResult<F>> {
  const flow: AnyFlow = "flow" in target ? target.flow : target as AnyFlow;
  const queues = extractRoutePlan(target as CompilableFlow).queues;
  const clock = options.clock ?? fakeClock();
  const runId = options.runId ?? crypto.randomUUID();
  const signal = options.signal ?? new AbortController().signal;
  const runInput = storedJson(jsonText(input ?? null, "input") ?? "null");

  const flowInputs = new FlowInputCache(noDatabase("ctx.flowInput"));
  flowInputs.seed(runId, runInput);
  const resources = {
    env: options.env ?? {},
    shutdownSignal: signal,
    sql: options.sql ?? noDatabase("ctx.sql"),
    supabase: () => options.supabase ?? unavailable("ctx.supabase"),
    flowInputs,
    inputChecks: new RunInputChecks(flowInputs),
    extra: options.context,
  };
  const steps: readonly StepDefinition[] = flow.steps();
  const run = new InMemoryRun(
    { steps, maxAttempts: flow.options.maxAttempts, baseDelay: flow.options.baseDelay },
    runInput,
    () => clock.now(),
  );
  const attempts = new Map<string, InMemoryAttempt[]>(steps.map((s) => [s.slug, []]));
  const overrides = (options.handlers ?? {}) as { readonly [slug: string]: AnyStepHandler };
  let messageId = 0;

  run.startReadySteps();
  while (run.status === "started") {
    const task = nextTask(run.queue);
    if (task === undefined) {
      throw new Error(`runFlowInMemory: run of ${flow.slug} has no task to run but is not done`);
    }
    if (task.visibleAt > clock.now()) await clock.sleep(task.visibleAt - clock.now());
    run.queue.splice(run.queue.indexOf(task), 1);
    const startedAt = clock.now();
    // A dependent's input is built as an object here; the worker reads it in jsonb's key order.
    const input = storedJson(JSON.stringify(task.input));
    const claimed: ClaimedTask = {
      messageId: String(++messageId),
      flowSlug: flow.slug,
      runId,
      stepSlug: task.step.slug,
      taskIndex: task.index,
      input,
      attempt: task.attempt,
    };
    const message: PgmqMessageRecord = {
      msg_id: claimed.messageId,
      read_ct: task.attempt,
      enqueued_at: new Date(startedAt).toISOString(),
      vt: new Date(startedAt).toISOString(),
      message: {
        flow_slug: flow.slug,
        run_id: runId,
        step_slug: task.step.slug,
        task_index: task.index,
      },
    };
    const record = attempts.get(task.step.slug)!;
    const base = { taskIndex: task.index, attempt: task.attempt, startedAt };
    try {
      if (flow.inputSchema !== undefined) {
        await checkRunInput(resources.inputChecks, runId, flow.inputSchema);
      }
      const context = buildContext(resources, queues[task.step.slug], claimed, message, signal);
      const handler = overrides[task.step.slug] ?? task.step.handler;
      const output = await handler(input, context);
      const where = `${flow.slug}.${task.step.slug}`;
      if (task.step.kind === "array" && !Array.isArray(output)) {
        throw new Error(
          `array step ${where} returned ${output === null ? "null" : typeof output}, not an array`,
        );
      }
      const stored = storedJson(outputJson(output, where));
      record.push({ ...base, outcome: "completed" });
      run.taskCompleted(task, stored);
    } catch (error) {
      const text = errorMessage(error);
      if (error instanceof RetryAfter) {
        const ended = run.taskDeferred(task, text, error.delaySeconds);
        record.push({
          ...base,
          outcome: ended.outcome,
          error: ended.error,
          ...(ended.retryDelay === undefined ? {} : { retryDelay: ended.retryDelay }),
        });
        continue;
      }
      const retryDelay = run.taskFailed(task, text, error instanceof RunInputRejected);
      record.push({
        ...base,
        outcome: "failed",
        error: text,
        ...(retryDelay === undefined ? {} : { retryDelay }),
      });
    }
  }

  const stepResults: { [slug: string]: InMemoryStepResult } = {};
  for (const step of steps) {
    const state = run.states.get(step.slug)!;
    stepResults[step.slug] = {
      status: state.status,
      output: state.status === "completed" ? state.output ?? null : null,
      attempts: attempts.get(step.slug)!,
      ...(state.skipReason === undefined ? {} : { skipReason: state.skipReason }),
      ...(state.error === undefined ? {} : { error: state.error }),
    };
  }
  return {
    runId,
    status: run.status,
    output: (run.status === "completed" ? storedJson(JSON.stringify(run.output)) : null) as
      | FlowOutputOf<F>
      | null,
    ...(run.error === undefined ? {} : { error: run.error }),
    steps: stepResults as InMemoryRunResult<F>["steps"],
  };
}

/** The queued task due first (the earliest made ready among those due at the same time). */
function nextTask(queue: readonly QueuedTask[]): QueuedTask | undefined {
  let next: QueuedTask | undefined;
  for (const task of queue) if (next === undefined || task.visibleAt < next.visibleAt) next = task;
  return next;
}

function unavailable(what: string): never {
  throw new Error(
    `${what} is not available in runFlowInMemory (there is no database); ` +
      `pass a stub in its options (sql, supabase) or keep the call out of the handler under test`,
  );
}

/** A stand-in for the pool: any call or member use throws, saying what to pass instead. */
function noDatabase(what: string): Sql {
  const fail = () => unavailable(what);
  return new Proxy(fail, {
    apply: fail,
    get: (_target, key) => (typeof key === "symbol" ? undefined : fail),
  }) as unknown as Sql;
}
