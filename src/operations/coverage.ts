/**
 * The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
 * worker serves each. A point-in-time operator check built on `pgflow.queue_coverage`, which
 * decides each pair's status (one place, so the CLI, `status` and the dashboard agree).
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import { pairKey, pairKeys } from "../util/pair_key.ts";

/**
 * What a pair needs, as `pgflow.queue_coverage` decides it (the first that applies):
 * `MISSING` work is waiting (tasks waiting for capacity, queued or started, in started runs) and no live worker serves
 * the pair; `STALE` a live worker serves it, but a started task is held by a worker that is gone
 * (stale heartbeat, stopped, or no row); `PARTIAL` a live worker serves it, but not every live
 * worker on the queue does (they read its messages and hand them back: give every worker on a
 * queue the same handler set); `ok` every live worker on the queue serves it; `idle` a route with
 * no work waiting and no live worker.
 *
 * @example
 * ```ts
 * import type { CoverageStatus } from "@pgflow/shared/tools";
 *
 * const needsAction = (s: CoverageStatus) => s === "MISSING" || s === "STALE";
 * ```
 */
export type CoverageStatus = "MISSING" | "STALE" | "PARTIAL" | "ok" | "idle";

/**
 * One (flow, step) pair on one queue.
 *
 * @example
 * ```ts
 * import type { CoverageRow } from "@pgflow/shared/tools";
 *
 * const missing = (rows: CoverageRow[]) => rows.filter((r) => r.status === "MISSING");
 * ```
 */
export interface CoverageRow {
  /** The queue. */
  queueName: string;
  /** The concrete flow slug. */
  flowSlug: string;
  /** The step slug. */
  stepSlug: string;
  /** The pair is a persisted route (not only a snapshot of in-flight tasks). */
  routed: boolean;
  /** Tasks of the pair waiting on the queue (in started runs). */
  queuedTasks: number;
  /** Tasks of the pair running now (in started runs). */
  startedTasks: number;
  /** Started tasks whose worker is gone: stale heartbeat, stopped, or no worker row. */
  staleTasks: number;
  /** Live workers of the queue that have a handler for the pair. */
  liveWorkers: number;
  /** Whether at least one live worker serves the pair. */
  served: boolean;
  /** The verdict (see {@link CoverageStatus}). */
  status: CoverageStatus;
}

/**
 * Reads the coverage of one queue, or of every queue when `queueName` is omitted.
 *
 * @example
 * ```ts
 * import postgres from "npm:postgres@3.4.7";
 * import { queueCoverage } from "@pgflow/shared/tools";
 *
 * const sql = postgres(Deno.env.get("DATABASE_URL")!);
 * const missing = (await queueCoverage(sql, "thread_processing"))
 *   .filter((r) => r.status === "MISSING");
 * ```
 */
export async function queueCoverage(
  sql: Sql,
  queueName?: string,
  staleAfterSeconds = 30,
): Promise<CoverageRow[]> {
  const rows = await sql<
    {
      queue_name: string;
      flow_slug: string;
      step_slug: string;
      routed: boolean;
      queued_tasks: string;
      started_tasks: string;
      stale_tasks: string;
      live_workers: string;
      served: boolean;
      status: CoverageStatus;
    }[]
  >`select * from pgflow.queue_coverage(${
    queueName ?? null
  }::text, make_interval(secs => ${staleAfterSeconds}))`;
  return rows.map((r) => ({
    queueName: r.queue_name,
    flowSlug: r.flow_slug,
    stepSlug: r.step_slug,
    routed: r.routed,
    queuedTasks: Number(r.queued_tasks),
    startedTasks: Number(r.started_tasks),
    staleTasks: Number(r.stale_tasks),
    liveWorkers: Number(r.live_workers),
    served: r.served,
    status: r.status,
  }));
}

/**
 * How many pairs have each status.
 *
 * @example
 * ```ts
 * import { coverageCounts } from "@pgflow/shared/tools";
 *
 * coverageCounts([]); // { MISSING: 0, STALE: 0, PARTIAL: 0, ok: 0, idle: 0 }
 * ```
 */
export function coverageCounts(rows: readonly CoverageRow[]): Record<CoverageStatus, number> {
  const counts: Record<CoverageStatus, number> = {
    MISSING: 0,
    STALE: 0,
    PARTIAL: 0,
    ok: 0,
    idle: 0,
  };
  for (const r of rows) counts[r.status]++;
  return counts;
}

/**
 * Renders coverage rows as a plain-text table with each pair's status.
 *
 * @example
 * ```ts
 * import { formatCoverage } from "@pgflow/shared/tools";
 *
 * console.log(formatCoverage([]));
 * ```
 */
export function formatCoverage(rows: readonly CoverageRow[]): string {
  if (rows.length === 0) return "no routes or in-flight tasks";
  const header = [
    "queue",
    "flow",
    "step",
    "route",
    "queued",
    "started",
    "stale",
    "workers",
    "status",
  ];
  const body = rows.map((r) => [
    r.queueName,
    r.flowSlug,
    r.stepSlug,
    r.routed ? "yes" : "snapshot",
    String(r.queuedTasks),
    String(r.startedTasks),
    String(r.staleTasks),
    String(r.liveWorkers),
    r.status,
  ]);
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((row) => row[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...body.map(line)].join("\n");
}

/**
 * The note for `PARTIAL` pairs, naming them: served by some live workers of their queue but not
 * all, whose handler sets differ. One line; `pgflow coverage` and `pgflow status` print it.
 *
 * @example
 * ```ts
 * import { partialNote } from "./coverage.ts";
 *
 * partialNote([]); // "0 pair(s) PARTIAL: …"
 * ```
 */
export function partialNote(rows: readonly CoverageRow[]): string {
  const partial = rows.filter((r) => r.status === "PARTIAL");
  const named = partial.map((r) =>
    `${r.queueName}: ${r.flowSlug}.${r.stepSlug} (${r.liveWorkers} live worker(s) serve it)`
  );
  return `${partial.length} pair(s) PARTIAL: the live workers of a queue serve different pairs ` +
    `(${named.join(", ")}); the others read these messages and hand them back, so each such read ` +
    "is wasted. A moment of this is every deploy that changes a handler set; to end it, give " +
    "every worker on a queue the same handlers (restart or redeploy the ones that lack them)";
}

/**
 * The live workers on `queue` that serve each of `pairs` (fresh heartbeat, not stopped or
 * deprecated), named `function (worker 1a2b3c4d)`, keyed `flow` U+001F `step`: what a worker's
 * report of messages it cannot claim tells the operator (another worker serves them, or none).
 * One indexed read of the queue's recent workers.
 *
 * @example
 * ```ts
 * import postgres from "npm:postgres@3.4.7";
 * import { pairServers } from "./coverage.ts";
 *
 * const sql = postgres(Deno.env.get("DATABASE_URL")!);
 * const servedBy = await pairServers(sql, "thread_processing", [["triage_v3", "classify"]]);
 * ```
 */
export async function pairServers(
  sql: Sql,
  queue: string,
  pairs: readonly (readonly [string, string])[],
  staleAfterSeconds = 30,
): Promise<Map<string, string[]>> {
  const rows = await sql<{ worker_id: string; function_name: string; supported: unknown }[]>`
    select w.worker_id::text, w.function_name, w.supported from pgflow.workers w
    where w.queue_name = ${queue}
      and w.last_heartbeat_at > clock_timestamp() - make_interval(secs => ${staleAfterSeconds})
      and w.stopped_at is null and w.deprecated_at is null
    order by w.function_name, w.worker_id`;
  const wanted = pairKeys(pairs);
  const servedBy = new Map<string, string[]>();
  for (const row of rows) {
    const supported = Array.isArray(row.supported) ? row.supported : [];
    for (const pair of supported) {
      if (!Array.isArray(pair) || pair.length !== 2) continue;
      const k = pairKey(String(pair[0]), String(pair[1]));
      if (!wanted.has(k)) continue;
      const list = servedBy.get(k) ?? [];
      list.push(`${row.function_name} (worker ${row.worker_id.slice(0, 8)})`);
      servedBy.set(k, list);
    }
  }
  return servedBy;
}
