/**
 * The task path's telemetry, loaded only where something can record it. `@opentelemetry/api` and
 * `attempts.ts` cost a worker tens of milliseconds of module load at every cold start, and without
 * a registered SDK (Deno's `OTEL_DENO=true` registers one at boot) every call of the API is a
 * no-op. So nothing here imports them until the API's global registry exists; until then each
 * function answers as the no-op API would. A worker awaits {@link loadTelemetry} during its
 * startup, before its first read, so its read and its spans are decided with the module loaded.
 *
 * @module
 */
import type * as Attempts from "./attempts.ts";
import type { AttemptIdentity, AttemptOutcome, QueueSample } from "./attempts.ts";

/** Where `@opentelemetry/api` 1.x keeps what an SDK registered (its `global-utils`). */
const REGISTRY = Symbol.for("opentelemetry.js.api.1");

/** What the task path uses of `@opentelemetry/api`'s value exports. */
interface Api {
  readonly context: { with<T>(context: Attempts.AttemptTelemetry["context"], fn: () => T): T };
}

let loaded: { attempts: typeof Attempts; api: Api } | undefined;
let loading: Promise<void> | undefined;

/**
 * Whether an OpenTelemetry SDK has registered with the API in this process: without one, the API
 * records nothing and need not be loaded.
 *
 * @example
 * ```ts
 * import { otelRegistered } from "./otel_loader.ts";
 *
 * if (!otelRegistered()) console.log("telemetry is off: OTEL_DENO is not set");
 * ```
 */
export function otelRegistered(): boolean {
  return REGISTRY in globalThis;
}

/**
 * Loads the telemetry modules if an SDK is registered; resolves at once otherwise. Called again,
 * it returns the same load.
 *
 * @example
 * ```ts
 * import { loadTelemetry } from "./otel_loader.ts";
 *
 * await loadTelemetry(); // before the first read of a worker
 * ```
 */
export function loadTelemetry(): Promise<void> {
  if (loaded !== undefined || !otelRegistered()) return Promise.resolve();
  loading ??= Promise.all([import("./attempts.ts"), import("npm:@opentelemetry/api@1.9.0")])
    .then(([attempts, api]) => {
      loaded = { attempts, api };
    });
  return loading;
}

/**
 * Whether spans are recorded: false until the telemetry is loaded (see `attempts.ts`).
 *
 * @example
 * ```ts
 * import { tracingEnabled } from "./otel_loader.ts";
 *
 * if (tracingEnabled()) console.log("spans are exported");
 * ```
 */
export function tracingEnabled(): boolean {
  if (loaded === undefined) {
    void loadTelemetry();
    return false;
  }
  return loaded.attempts.tracingEnabled();
}

/**
 * The W3C `traceparent` of the span active in the caller's context, or `null` (no SDK, or no
 * span): loads the telemetry first where an SDK is registered.
 *
 * @example
 * ```ts
 * import { activeTraceparent } from "./otel_loader.ts";
 *
 * const traceparent = await activeTraceparent(); // "00-<trace id>-<span id>-01", or null
 * ```
 */
export async function activeTraceparent(): Promise<string | null> {
  if (!otelRegistered()) return null;
  await loadTelemetry();
  return loaded!.attempts.activeTraceparent();
}

/** One task attempt's telemetry: its handler runs inside the attempt's span. */
export interface TaskAttempt {
  /** Runs `fn` in the attempt's context (its spans are children of the attempt's). */
  run<T>(fn: () => T): T;
  /** Ends the span with the attempt's outcome and records its duration and count. */
  end(outcome: AttemptOutcome, handlerSeconds: number, errorKind?: string): void;
}

const UNRECORDED: TaskAttempt = { run: (fn) => fn(), end: () => {} };

/**
 * Starts one task attempt's span and counts it (see `attempts.ts`); nothing while the telemetry is
 * not loaded.
 *
 * @example
 * ```ts
 * import { startAttempt } from "./otel_loader.ts";
 *
 * const attempt = startAttempt(
 *   { flowSlug: "demo", stepSlug: "a", runId: crypto.randomUUID(), taskIndex: 0, attempt: 1 },
 *   "demo",
 *   crypto.randomUUID(),
 * );
 * attempt.run(() => "the handler's result");
 * attempt.end("completed", 0.01);
 * ```
 */
export function startAttempt(
  task: Omit<AttemptIdentity, "queue" | "workerId" | "enqueuedAt">,
  queue: string,
  workerId: string,
  enqueuedAt?: string,
): TaskAttempt {
  // Nothing is built per task unless it is recorded: the identity is assembled only here.
  if (loaded === undefined) return UNRECORDED;
  const { api, attempts } = loaded;
  const attempt = attempts.startAttempt({
    flowSlug: task.flowSlug,
    stepSlug: task.stepSlug,
    runId: task.runId,
    taskIndex: task.taskIndex,
    attempt: task.attempt,
    traceparent: task.traceparent,
    queue,
    workerId,
    enqueuedAt,
  });
  return {
    run: (fn) => api.context.with(attempt.context, fn),
    end: (outcome, handlerSeconds, errorKind) => attempt.end(outcome, handlerSeconds, errorKind),
  };
}

/**
 * Records a queue's sample for the queue gauges (see `attempts.ts`); nothing while the telemetry
 * is not loaded.
 *
 * @example
 * ```ts
 * import { recordQueueSample } from "./otel_loader.ts";
 *
 * recordQueueSample("demo", { depth: 12, oldestSeconds: 3.5, waiting: 0 });
 * ```
 */
export function recordQueueSample(queue: string, sample: QueueSample): void {
  loaded?.attempts.recordQueueSample(queue, sample);
}
