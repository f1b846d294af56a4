/**
 * The spans of runs that ended without any worker's report: cancelled (`cancel_run`, and a child
 * run with its parent), failed by stalled recovery, completed or failed by the database's tick (a
 * wait timing out, an event, a child run's end). No report means no claim by ended_spans.ts, so a
 * worker that exports spans calls `pgflow.sweep_ended_spans` on a timer: one bounded page of runs
 * per call, one sweeper at a time across workers (the others skip), each span handed out once
 * whether the sweep or a report takes it. A run that ended while no worker was alive is found when
 * one next sweeps.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import type { Logger } from "../platform/logger.ts";
import { bounded } from "../platform/deadline.ts";
import { every } from "../util/periodic.ts";
import { tracingEnabled } from "./otel_loader.ts";
import { type EndedSpanRow, endedSpans, spanTarget, warnNotSent } from "./ended_spans.ts";
import { sendSpans } from "./otlp_spans.ts";

/** How often a worker that exports spans sweeps. */
export const SPAN_SWEEP_MS = 10_000;
/** Runs looked at per sweep: bounds each call's time, whatever the runs table holds. */
export const SPAN_SWEEP_PAGE = 1000;

/**
 * Sweeps every `intervalMs` (the first at once) until `signal` aborts, only while spans are
 * exported; otherwise starts nothing. A failed sweep is a warning and the next one goes on.
 *
 * @example
 * ```ts ignore
 * import { sweepEndedSpans } from "./span_sweep.ts";
 *
 * const done = sweepEndedSpans(sql, log, { intervalMs: 10_000, timeoutMs: 5_000 }, signal);
 * ```
 */
export function sweepEndedSpans(
  sql: Sql,
  log: Logger,
  timing: { readonly intervalMs: number; readonly timeoutMs: number },
  signal: AbortSignal,
): Promise<void> | undefined {
  if (!tracingEnabled()) return undefined;
  return every(timing.intervalMs, signal, async () => {
    const target = spanTarget(log);
    if (target === null) return;
    try {
      const rows = await bounded(
        sql<EndedSpanRow[]>`select * from pgflow.sweep_ended_spans(${SPAN_SWEEP_PAGE})`,
        "sweep_ended_spans",
        timing.timeoutMs,
      );
      await sendSpans(target, endedSpans(rows));
    } catch (error) {
      warnNotSent(log, "swept run and step spans not sent", error);
    }
  }, { firstDelayMs: 0 });
}
