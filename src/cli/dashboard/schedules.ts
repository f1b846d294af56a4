/**
 * The dashboard's Schedules panel: every schedule, its timing, next and last tick, the run its
 * last tick started (or why it did not), and how many ticks outages skipped. Inputs are not shown:
 * the panel says when things run, not with what.
 *
 * @module
 */
import type { Schedule } from "../../client/schedules.ts";
import type { ReadTx } from "./read_only.ts";

/** One schedule as the panel shows it: the client's fields, its timing in one text, no input. */
export interface ScheduleInfo extends
  Pick<
    Schedule,
    | "name"
    | "flow"
    | "paused"
    | "nextTickAt"
    | "lastTickAt"
    | "lastRunId"
    | "lastError"
    | "skippedTicks"
  > {
  /** `0 2 * * * (Europe/Paris)` or `every 10 s`. */
  readonly timing: string;
}

/**
 * Reads every schedule, by name (nothing when the engine predates schedules).
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readSchedules } from "./schedules.ts";
 *
 * // const schedules = await readOnly(sql, (tx) => readSchedules(tx));
 * ```
 */
export async function readSchedules(tx: ReadTx): Promise<ScheduleInfo[]> {
  const rows = await tx<
    {
      name: string;
      flow: string;
      timing: string;
      paused: boolean;
      next_tick_at: Date | null;
      last_tick_at: Date | null;
      last_run_id: string | null;
      last_error: string | null;
      skipped: number;
    }[]
  >`
    select s.schedule_name as name, s.flow_slug as flow,
           case when s.cron is null then format('every %s s', extract(epoch from s.every)::bigint)
                when s.time_zone = 'UTC' then s.cron
                else format('%s (%s)', s.cron, s.time_zone) end as timing,
           s.paused, case when s.paused then null else s.next_tick_at end as next_tick_at,
           s.last_tick_at, s.last_run_id::text, s.last_error, s.skipped_ticks::float8 as skipped
    from pgflow.schedules s
    order by s.schedule_name`;
  const iso = (d: Date | null) => (d === null ? null : d.toISOString());
  return rows.map((r) => ({
    name: r.name,
    flow: r.flow,
    timing: r.timing,
    paused: r.paused,
    nextTickAt: iso(r.next_tick_at),
    lastTickAt: iso(r.last_tick_at),
    lastRunId: r.last_run_id,
    lastError: r.last_error,
    skippedTicks: r.skipped,
  }));
}
