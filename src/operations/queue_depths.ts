/**
 * Each PGMQ queue's depth and the live workers reading it: what `pgflow status` prints and the
 * dashboard draws, read once here so both say the same.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";

/** One PGMQ queue and the live workers reading it. */
export interface QueueDepth {
  /** The queue's name. */
  readonly name: string;
  /** Messages in the queue (visible or not); `null` for a queue with workers but no table. */
  readonly messages: number | null;
  /** Messages visible now; `null` when this PGMQ does not report it. */
  readonly visible: number | null;
  /** Age of the oldest message in seconds; `null` when the queue is empty. */
  readonly oldestSeconds: number | null;
  /** Workers on the queue with a fresh heartbeat, not stopped or deprecated. */
  readonly liveWorkers: number;
}

const num = (v: unknown): number | null => (v === null || v === undefined ? null : Number(v));

/**
 * Every PGMQ queue (from `pgmq.metrics_all()`), plus the queues that have live workers but no
 * table, sorted by name. A worker is live when its heartbeat is at most `staleAfterSeconds` old.
 *
 * @example
 * ```ts ignore
 * const empty = (await queueDepths(sql, 30)).filter((q) => q.messages === 0);
 * ```
 */
export async function queueDepths(sql: Sql, staleAfterSeconds: number): Promise<QueueDepth[]> {
  // `select *`: queue_visible_length exists only from PGMQ 1.5 on.
  const metrics = await sql<Record<string, unknown>[]>`select * from pgmq.metrics_all()`;
  const workers = await sql<{ queue_name: string; n: number }[]>`
    select queue_name, count(*)::int as n from pgflow.workers
    where stopped_at is null and deprecated_at is null
      and last_heartbeat_at > now() - make_interval(secs => ${staleAfterSeconds})
    group by queue_name`;
  const live = new Map(workers.map((w) => [w.queue_name, w.n]));
  const queues: QueueDepth[] = metrics.map((m) => ({
    name: String(m.queue_name),
    messages: num(m.queue_length),
    visible: num(m.queue_visible_length),
    oldestSeconds: num(m.oldest_msg_age_sec),
    liveWorkers: live.get(String(m.queue_name)) ?? 0,
  }));
  for (const [name, n] of live) {
    if (!queues.some((q) => q.name === name)) {
      queues.push({ name, messages: null, visible: null, oldestSeconds: null, liveWorkers: n });
    }
  }
  return queues.sort((a, b) => a.name.localeCompare(b.name));
}
