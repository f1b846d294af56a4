/**
 * One coverage row's verdict, from whichever `pgflow.queue_coverage()` the database has: newer
 * engines return a `status` column ('MISSING' | 'STALE' | 'ok' | 'idle'); older ones only
 * `served`, which reads as `ok` or `MISSING`.
 *
 * @module
 */

/** What the dashboard shows for a (queue, flow, step) pair. */
export type CoverageStatus = "MISSING" | "STALE" | "ok" | "idle";

/**
 * The status of a raw `pgflow.queue_coverage()` row: its `status` column when present, else
 * `served ? "ok" : "MISSING"`.
 *
 * @example
 * ```ts
 * import { coverageStatus } from "./coverage_status.ts";
 *
 * coverageStatus({ served: false }); // "MISSING"
 * coverageStatus({ served: false, status: "idle" }); // "idle"
 * ```
 */
export function coverageStatus(row: Readonly<Record<string, unknown>>): CoverageStatus {
  const status = row.status;
  if (status === "MISSING" || status === "STALE" || status === "ok" || status === "idle") {
    return status;
  }
  return row.served === true ? "ok" : "MISSING";
}
