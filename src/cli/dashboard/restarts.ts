/**
 * The runs made from other runs by a retry or a resume, read for the dashboard's run view and for
 * its lists (Runs, Recent failures), so a failed run that was retried or resumed since says so
 * wherever it is listed. The same runs, in the same order and number, as `pgflow.get_run` and
 * `pgflow.list_runs` give in their `restarts`.
 *
 * @module
 */
import type { RestartMode, RunRestart, RunStatus } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";

/** Restarts listed per run, newest first (as `get_run` and `list_runs` list them). */
export const RESTARTS_LISTED = 20;

/**
 * A SQL fragment, true when `pgflow.runs` has its lineage column (`restart_of_run_id`): select it
 * beside a read the caller makes anyway, and pass it to {@link readRestarts}, instead of asking
 * the database once more. A database migrated before restarts existed has none: the dashboard can
 * be newer than the schema it looks at.
 *
 * @example
 * ```ts
 * import { hasLineage } from "./restarts.ts";
 *
 * // const [{ lineage }] = await tx`select ${hasLineage(tx)} as lineage`;
 * ```
 */
export function hasLineage(tx: ReadTx): ReturnType<ReadTx> {
  return tx`exists (select 1 from pg_attribute
                    where attrelid = 'pgflow.runs'::regclass and attname = 'restart_of_run_id'
                      and not attisdropped)`;
}

/**
 * The restarts of each of `runIds`, newest first (at most {@link RESTARTS_LISTED} each), by run
 * id; a run never restarted has no entry. Nothing is read when `lineage` (see {@link hasLineage})
 * is false or there is no run.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readRestarts } from "./restarts.ts";
 *
 * // const byRun = await readOnly(sql, (tx) => readRestarts(tx, [runId], true));
 * // byRun.get(runId)?.[0]; // { runId: "…", mode: "retry", status: "started", startedAt: "…" }
 * ```
 */
export async function readRestarts(
  tx: ReadTx,
  runIds: readonly string[],
  lineage: boolean,
): Promise<Map<string, RunRestart[]>> {
  const byRun = new Map<string, RunRestart[]>();
  if (!lineage || runIds.length === 0) return byRun;
  // One probe of runs_restart_of_idx per listed run.
  const rows = await tx<
    { source: string; run_id: string; mode: RestartMode; status: RunStatus; started_at: Date }[]
  >`
    select s.id::text as source, x.run_id::text, x.restart_mode as mode, x.status, x.started_at
    from unnest(${[...new Set(runIds)]}::uuid[]) as s(id)
    cross join lateral (
      select r.run_id, r.restart_mode, r.status, r.started_at from pgflow.runs r
      where r.restart_of_run_id = s.id
      order by r.started_at desc, r.run_id limit ${RESTARTS_LISTED}
    ) x
    order by s.id, x.started_at desc, x.run_id`;
  for (const r of rows) {
    const list = byRun.get(r.source) ?? [];
    list.push({
      runId: r.run_id,
      mode: r.mode,
      status: r.status,
      startedAt: r.started_at.toISOString(),
    });
    byRun.set(r.source, list);
  }
  return byRun;
}
