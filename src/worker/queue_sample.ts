import type { Logger } from "../platform/logger.ts";
import type { Sql } from "../platform/types.ts";
import { bounded } from "../platform/deadline.ts";
import { recordQueueSample, tracingEnabled } from "../telemetry/otel_loader.ts";
import { every } from "../util/periodic.ts";

/** How often a worker samples its queue for the gauges, when telemetry is on. */
export const QUEUE_SAMPLE_MS = 30_000;

/**
 * Samples the worker's queue every `intervalMs` for the `pgflow.queue.depth`,
 * `pgflow.queue.oldest_age` and `pgflow.tasks.waiting` gauges (docs/telemetry.md), only when
 * telemetry is on; otherwise starts nothing. Two bounded queries per sample: `pgmq.metrics`
 * counts the queue's rows, and `pgflow.waiting_tasks` the tasks waiting for capacity. A failed
 * sample is a debug line; the gauges keep the last one.
 *
 * @example
 * ```ts ignore
 * const done = sampleQueue(sql, "thread_processing", log, { intervalMs: 30_000, timeoutMs: 5_000 }, signal);
 * ```
 */
export function sampleQueue(
  sql: Sql,
  queue: string,
  log: Logger,
  timing: { readonly intervalMs: number; readonly timeoutMs: number },
  signal: AbortSignal,
): Promise<void> | undefined {
  if (!tracingEnabled()) return undefined;
  // The first sample at once: the gauges have a value from the worker's start.
  return every(timing.intervalMs, signal, async () => {
    try {
      const [m] = await bounded(
        sql<{ depth: number; oldest: number | null }[]>`
          select queue_length::float8 as depth, oldest_msg_age_sec::float8 as oldest
          from pgmq.metrics(${queue})`,
        "queue sample",
        timing.timeoutMs,
      );
      const [w] = await bounded(
        sql<{ waiting: number }[]>`
          select coalesce(sum(waiting), 0)::float8 as waiting from pgflow.waiting_tasks(${queue})`,
        "queue sample",
        timing.timeoutMs,
      );
      recordQueueSample(queue, {
        depth: m.depth,
        oldestSeconds: m.oldest ?? 0,
        waiting: w.waiting,
      });
    } catch (error) {
      log.debug("queue sample failed", { error: (error as Error).message });
    }
  }, { firstDelayMs: 0 });
}
