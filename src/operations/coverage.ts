/**
 * The coverage check: per queue, the (flow, step) pairs that need a handler and whether a live
 * worker serves each. A point-in-time operator check built on `pgflow.queue_coverage`, which
 * decides each pair's status (one place, so the CLI, `status` and the dashboard agree).
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";

/**
 * What a pair needs, as `pgflow.queue_coverage` decides it (the first that applies):
 * `MISSING` work is waiting (queued or started tasks in started runs) and no live worker serves
 * the pair; `STALE` a live worker serves it, but a started task is held by a worker that is gone
 * (stale heartbeat, stopped, or no row); `ok` a live worker serves it; `idle` a route with no work
 * waiting and no live worker.
 *
 * @example
 * ```ts
 * import type { CoverageStatus } from "@pgflow/shared";
 *
 * const needsAction = (s: CoverageStatus) => s === "MISSING" || s === "STALE";
 * ```
 */
export type CoverageStatus = "MISSING" | "STALE" | "ok" | "idle";

/**
 * One (flow, step) pair on one queue.
 *
 * @example
 * ```ts
 * import type { CoverageRow } from "@pgflow/shared";
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
 * import { queueCoverage } from "@pgflow/shared";
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
 * import { coverageCounts } from "@pgflow/shared";
 *
 * coverageCounts([]); // { MISSING: 0, STALE: 0, ok: 0, idle: 0 }
 * ```
 */
export function coverageCounts(rows: readonly CoverageRow[]): Record<CoverageStatus, number> {
  const counts: Record<CoverageStatus, number> = { MISSING: 0, STALE: 0, ok: 0, idle: 0 };
  for (const r of rows) counts[r.status]++;
  return counts;
}

/**
 * Renders coverage rows as a plain-text table with each pair's status.
 *
 * @example
 * ```ts
 * import { formatCoverage } from "@pgflow/shared";
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
