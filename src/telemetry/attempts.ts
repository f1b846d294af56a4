/**
 * OpenTelemetry for the task path, on `@opentelemetry/api` alone: Deno exports what it records when
 * started with `OTEL_DENO=true`; with no exporter every call here is the API's no-op.
 *
 * A run outlives the process that started it, so no span stays open across it: the trace context
 * the run was started in is stored on its row (`runs.traceparent`), and each task attempt's span is
 * a child of its step's span, whose id every worker derives from the run id and the step
 * (span_ids.ts); the run's and the steps' spans are emitted when they end (ended_spans.ts). Docs: docs/telemetry.md.
 *
 * Attributes name the run and the task (queue, flow, step, worker, attempt, outcome), never an
 * input, an output or an error's text.
 *
 * @module
 */
import {
  type Attributes,
  type Context,
  context,
  metrics,
  ROOT_CONTEXT,
  type Span,
  SpanKind,
  SpanStatusCode,
  trace,
} from "npm:@opentelemetry/api@1.9.0";
import { ENGINE_VERSION } from "../util/version.ts";
import { runTrace, stepSpanId } from "./span_ids.ts";

const SCOPE = "@pgflow/shared";

const tracer = trace.getTracer(SCOPE, ENGINE_VERSION);
const meter = metrics.getMeter(SCOPE, ENGINE_VERSION);

const started = meter.createCounter("pgflow.tasks.started", {
  description: "Task attempts a worker started",
});
const completed = meter.createCounter("pgflow.tasks.completed", {
  description: "Task attempts that completed",
});
const failed = meter.createCounter("pgflow.tasks.failed", {
  description: "Task attempts that failed (pgflow.outcome: retried or failed)",
});
const pickup = meter.createHistogram("pgflow.task.pickup_latency", {
  description: "From a task's message being sent to its first attempt's start",
  unit: "s",
});
const duration = meter.createHistogram("pgflow.task.duration", {
  description: "A handler's run time, per attempt",
  unit: "s",
});

/**
 * The W3C `traceparent` of the span active in the caller's context, or `null` when none is
 * (no exporter, or no span around the call): what `startFlow` stores on the run.
 *
 * @example
 * ```ts
 * import { activeTraceparent } from "./attempts.ts";
 *
 * const traceparent = activeTraceparent(); // "00-<trace id>-<span id>-01", or null
 * ```
 */
export function activeTraceparent(): string | null {
  const span = trace.getSpanContext(context.active());
  if (span === undefined || !trace.isSpanContextValid(span)) return null;
  return `00-${span.traceId}-${span.spanId}-${
    (span.traceFlags & 0xff).toString(16).padStart(2, "0")
  }`;
}

/**
 * The context an attempt's span starts in: its step's span, named by the id every worker derives
 * for it (the step's span itself is emitted when the step ends: ended_spans.ts), in
 * the run's trace.
 */
function stepContext(runId: string, stepSlug: string, traceparent?: string | null): Context {
  const run = runTrace(runId, traceparent);
  return trace.setSpanContext(ROOT_CONTEXT, {
    traceId: run.traceId,
    spanId: stepSpanId(runId, stepSlug),
    traceFlags: run.traceFlags,
    isRemote: true,
  });
}

/**
 * Whether spans are recorded (an exporter is active): decides once whether the read brings each
 * run's `traceparent`, so a worker without telemetry reads nothing more. The probe span is never
 * ended, so it is never exported.
 *
 * @example
 * ```ts
 * import { tracingEnabled } from "./attempts.ts";
 *
 * if (tracingEnabled()) console.log("spans are exported");
 * ```
 */
export function tracingEnabled(): boolean {
  return tracer.startSpan("pgflow.probe").isRecording();
}

let recording: boolean | undefined;

/** What identifies one task attempt on its span and its metrics. */
export interface AttemptIdentity {
  /** The queue it was claimed on. */
  readonly queue: string;
  /** The worker's id. */
  readonly workerId: string;
  /** The concrete flow slug. */
  readonly flowSlug: string;
  /** The step slug. */
  readonly stepSlug: string;
  /** The run id. */
  readonly runId: string;
  /** The task index. */
  readonly taskIndex: number;
  /** The attempt (1-based). */
  readonly attempt: number;
  /** The run's `traceparent`, when it was started in a trace. */
  readonly traceparent?: string | null;
  /** When the task's message was sent (ISO), for the first attempt's pickup latency. */
  readonly enqueuedAt?: string;
}

/** How an attempt ended, as its span and metrics say. */
export type AttemptOutcome = "completed" | "retried" | "failed" | "ignored" | "unreported";

/** One task attempt's span and metrics, from its start to its report. */
export interface AttemptTelemetry {
  /** The context the handler runs in: its own spans are children of the attempt's. */
  readonly context: Context;
  /** Ends the span with the attempt's outcome and records its duration and count. */
  end(outcome: AttemptOutcome, handlerSeconds: number, errorKind?: string): void;
}

/**
 * Starts one task attempt's span (a child of the run's trace context) and counts it started.
 *
 * @example
 * ```ts
 * import { startAttempt } from "./attempts.ts";
 *
 * const attempt = startAttempt({
 *   queue: "demo", workerId: crypto.randomUUID(), flowSlug: "demo", stepSlug: "a",
 *   runId: crypto.randomUUID(), taskIndex: 0, attempt: 1,
 * });
 * attempt.end("completed", 0.01);
 * ```
 */
export function startAttempt(task: AttemptIdentity): AttemptTelemetry {
  const counted: Attributes = {
    "messaging.destination.name": task.queue,
    "pgflow.flow": task.flowSlug,
    "pgflow.step": task.stepSlug,
  };
  started.add(1, counted);
  if (task.attempt === 1 && task.enqueuedAt !== undefined) {
    const waited = (Date.now() - Date.parse(task.enqueuedAt)) / 1000;
    if (waited >= 0) pickup.record(waited, counted);
  }
  // Without an exporter the span is the API's no-op: its parent needs no computing.
  recording ??= tracingEnabled();
  const parent = recording
    ? stepContext(task.runId, task.stepSlug, task.traceparent)
    : ROOT_CONTEXT;
  const span: Span = tracer.startSpan(
    `pgflow.task ${task.flowSlug}.${task.stepSlug}`,
    {
      kind: SpanKind.CONSUMER,
      attributes: {
        ...counted,
        "pgflow.run_id": task.runId,
        "pgflow.task_index": task.taskIndex,
        "pgflow.attempt": task.attempt,
        "pgflow.worker_id": task.workerId,
      },
    },
    parent,
  );
  return {
    context: trace.setSpan(parent, span),
    end(outcome, handlerSeconds, errorKind) {
      const measured = { ...counted, "pgflow.outcome": outcome };
      duration.record(handlerSeconds, measured);
      if (outcome === "completed") completed.add(1, counted);
      else if (outcome === "retried" || outcome === "failed") failed.add(1, measured);
      span.setAttribute("pgflow.outcome", outcome);
      if (outcome === "completed") span.setStatus({ code: SpanStatusCode.OK });
      else if (outcome !== "ignored") {
        // The kind names the error's class or code, never its text (which may quote data).
        span.setStatus({ code: SpanStatusCode.ERROR, message: errorKind });
      }
      if (errorKind !== undefined) span.setAttribute("error.type", errorKind);
      span.end();
    },
  };
}

/** One queue's depth and oldest message, as a worker last sampled them. */
export interface QueueSample {
  /** Messages in the queue. */
  readonly depth: number;
  /** Age of the oldest message in seconds (0 when empty). */
  readonly oldestSeconds: number;
  /** Tasks of the queue waiting for capacity (a concurrency limit), which have no message yet. */
  readonly waiting: number;
}

const samples = new Map<string, QueueSample>();
let gaugesObserved = false;

/**
 * Records a queue's depth, oldest-message age and tasks waiting for capacity for the
 * `pgflow.queue.depth`, `pgflow.queue.oldest_age` and `pgflow.tasks.waiting` gauges, which report the latest sample of each queue at every export
 * (the worker samples its queue on a timer; the export reads no database).
 *
 * @example
 * ```ts
 * import { recordQueueSample } from "./attempts.ts";
 *
 * recordQueueSample("demo", { depth: 12, oldestSeconds: 3.5, waiting: 0 });
 * ```
 */
export function recordQueueSample(queue: string, sample: QueueSample): void {
  samples.set(queue, sample);
  if (gaugesObserved) return;
  gaugesObserved = true;
  const gauge = (name: string, description: string, value: (s: QueueSample) => number) =>
    meter.createObservableGauge(name, {
      description,
      ...(name.endsWith("_age") ? { unit: "s" } : {}),
    })
      .addCallback((result) => {
        for (const [queue, s] of samples) {
          result.observe(value(s), { "messaging.destination.name": queue });
        }
      });
  gauge("pgflow.queue.depth", "Messages in the queue at the last sample", (s) => s.depth);
  gauge("pgflow.queue.oldest_age", "Age of the queue's oldest message", (s) => s.oldestSeconds);
  gauge(
    "pgflow.tasks.waiting",
    "Tasks waiting for capacity (a concurrency limit)",
    (s) => s.waiting,
  );
}
