/**
 * The spans of runs and steps, emitted when they end. After a report that completed or failed an
 * attempt (only then can its step or run have ended), the worker asks `pgflow.claim_ended_spans`
 * which of the run's spans have ended and are its to emit (each is handed out once, however many
 * workers report at the same moment), and sends them with the times their rows recorded. Reports go
 * on meanwhile: one claim runs at a time beside the task path, never inside it, and takes every
 * report that arrived while the previous one ran (one transaction for the batch).
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import type { Logger } from "../platform/logger.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { runTrace, stepSpanId } from "./span_ids.ts";
import { type FinishedSpan, type OtlpTarget, otlpTarget, sendSpans } from "./otlp_spans.ts";

/**
 * A row of `pgflow.claim_ended_spans` or `pgflow.sweep_ended_spans`: a step's span, or the run's
 * (`step_slug` '').
 */
export interface EndedSpanRow {
  readonly run_id: string;
  readonly step_slug: string;
  readonly status: string;
  readonly started_us: string | number | bigint;
  readonly ended_us: string | number | bigint;
  readonly flow_slug: string;
  readonly started_as: string | null;
  readonly traceparent: string | null;
  readonly tasks: number | null;
}

const STATUS: Record<string, FinishedSpan["status"]> = { completed: "ok", failed: "error" };

/**
 * The spans `rows` stand for, in the run's trace; none when the run's trace is not sampled.
 *
 * @example
 * ```ts
 * import { endedSpans } from "./ended_spans.ts";
 *
 * const [run] = endedSpans([{
 *   run_id: "0b6e2c7e-8d3a-4a7b-9a43-0a5d6f2c1e11", step_slug: "", status: "completed", started_us: "1765000000000000",
 *   ended_us: "1765000001000000", flow_slug: "orders", started_as: null, traceparent: null,
 *   tasks: null,
 * }]);
 * // run.name === "pgflow.run orders", a root span
 * ```
 */
export function endedSpans(rows: readonly EndedSpanRow[]): FinishedSpan[] {
  return rows.flatMap((row): FinishedSpan[] => {
    const runId = row.run_id;
    const trace = runTrace(runId, row.traceparent);
    if ((trace.traceFlags & 1) === 0) return [];
    const common = {
      traceId: trace.traceId,
      startUs: String(row.started_us),
      endUs: String(row.ended_us),
      status: STATUS[row.status] ?? "unset",
    };
    const identity = {
      "pgflow.flow": row.flow_slug,
      "pgflow.run_id": runId,
      "pgflow.status": row.status,
      ...(row.started_as === null ? {} : { "pgflow.alias": row.started_as }),
    };
    if (row.step_slug === "") {
      return [{
        ...common,
        spanId: trace.runSpanId,
        ...(trace.parentSpanId === undefined ? {} : { parentSpanId: trace.parentSpanId }),
        name: `pgflow.run ${row.flow_slug}`,
        attributes: identity,
      }];
    }
    return [{
      ...common,
      spanId: stepSpanId(runId, row.step_slug),
      parentSpanId: trace.runSpanId,
      name: `pgflow.step ${row.flow_slug}.${row.step_slug}`,
      attributes: {
        ...identity,
        "pgflow.step": row.step_slug,
        ...(row.tasks === null ? {} : { "pgflow.tasks": row.tasks }),
      },
    }];
  });
}

const emitters = new Set<EndedSpanEmitter>();
/** Most reports one claim takes: bounds its arrays and its transaction. */
const MAX_BATCH = 500;

/**
 * Waits until every emitter of this process has sent what it claimed: a stopping worker calls it
 * before closing its pool, or a claimed span would be lost with the process.
 *
 * @example
 * ```ts
 * import { flushEndedSpans } from "./ended_spans.ts";
 *
 * await flushEndedSpans();
 * ```
 */
export async function flushEndedSpans(): Promise<void> {
  await Promise.all([...emitters].map((e) => e.flush()));
}

/**
 * One worker's emitter of run and step spans. Made only while spans are recorded: without it the
 * task path neither queries nor sends anything for them.
 *
 * @example
 * ```ts ignore
 * import { EndedSpanEmitter } from "./ended_spans.ts";
 *
 * const spans = new EndedSpanEmitter(sql, log);
 * spans.reported({ runId, stepSlug: "a" }, "completed");
 * await spans.flush();
 * ```
 */
export class EndedSpanEmitter {
  readonly #sql: Sql;
  readonly #log: Logger;
  readonly #timeoutMs: number;
  /** Steps whose reports may have ended something, by "run step": one claim each. */
  readonly #pending = new Map<string, { runId: string; stepSlug: string }>();
  #draining: Promise<void> | undefined;

  constructor(sql: Sql, log: Logger, timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS) {
    this.#sql = sql;
    this.#log = log;
    this.#timeoutMs = timeoutMs;
  }

  /** After a report: a completed or failed attempt may have ended its step and its run. */
  reported(task: { readonly runId: string; readonly stepSlug: string }, outcome: string): void {
    if (outcome !== "completed" && outcome !== "failed") return;
    if (target === null) return;
    this.#pending.set(`${task.runId} ${task.stepSlug}`, task);
    if (this.#draining !== undefined) return;
    // Known to flushEndedSpans only while it has work: a stopped worker's emitter is not kept.
    emitters.add(this);
    this.#draining = this.#drain();
  }

  /** Resolves once everything reported so far has been claimed and sent (or given up). */
  flush(): Promise<void> {
    return this.#draining ?? Promise.resolve();
  }

  async #drain(): Promise<void> {
    while (this.#pending.size > 0) {
      const batch = [...this.#pending.values()].slice(0, MAX_BATCH);
      for (const task of batch) this.#pending.delete(`${task.runId} ${task.stepSlug}`);
      try {
        const rows = await bounded(
          this.#sql<EndedSpanRow[]>`
            select * from pgflow.claim_ended_spans(
              ${batch.map((t) => t.runId)}::uuid[], ${batch.map((t) => t.stepSlug)}::text[])`,
          "claim_ended_spans",
          this.#timeoutMs,
        );
        const target = spanTarget(this.#log);
        if (target !== null) await sendSpans(target, endedSpans(rows));
      } catch (error) {
        warnNotSent(this.#log, "run and step spans not sent", error);
      }
    }
    // Synchronously with the loop's last check: a report arriving later starts a new drain.
    this.#draining = undefined;
    emitters.delete(this);
  }
}

let target: OtlpTarget | null | undefined;

/**
 * Where this process sends run and step spans, from the `OTEL_*` variables (read once), or `null`
 * when its protocol is one not spoken here (said once, as a warning).
 *
 * @example
 * ```ts ignore
 * import { spanTarget } from "./ended_spans.ts";
 *
 * const target = spanTarget(log); // { url, headers, resource, encoding } or null
 * ```
 */
export function spanTarget(log: Logger): OtlpTarget | null {
  if (target !== undefined) return target;
  let env: Record<string, string> = {};
  try {
    env = Deno.env.toObject();
  } catch {
    // Without --allow-env: Deno's exporter has its defaults, and so do we.
  }
  const found = otlpTarget(env);
  if ("unsupported" in found) {
    log.warn("run and step spans are not sent with this OTLP protocol", {
      protocol: found.unsupported,
    });
    target = null;
  } else target = found;
  return target;
}

/**
 * Says that claimed spans were not sent, naming the error's kind and code, never its text. They
 * are lost, like any export a collector refuses.
 *
 * @example
 * ```ts ignore
 * import { warnNotSent } from "./ended_spans.ts";
 *
 * warnNotSent(log, "swept run and step spans not sent", new TypeError("fetch failed"));
 * ```
 */
export function warnNotSent(log: Logger, message: string, error: unknown): void {
  log.warn(message, {
    errorKind: error instanceof Error ? error.name : typeof error,
    errorCode: (error as { code?: string } | null)?.code,
  });
}
