/**
 * The run search of the dashboard's Runs panel: by flow, status and the start of the run id,
 * newest first. The filters come from the page's query string and are checked here, each bad
 * value named in a one-line error.
 *
 * @module
 */
import type { RunRestart, RunStatus } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";
import { hasLineage, readRestarts } from "./restarts.ts";

/** The statuses a run can have. */
export const RUN_STATUSES = [
  "started",
  "completed",
  "failed",
  "cancelled",
] as const satisfies readonly RunStatus[];

/** What to search for; every filter optional. */
export interface RunSearchFilter {
  /** The flow's slug, exactly. */
  readonly flow?: string;
  /** The run's status. */
  readonly status?: RunStatus;
  /** The start of the run id (hex digits, dashes allowed where the id has them). */
  readonly idPrefix?: string;
  /** At most this many runs (1 to 200). */
  readonly limit: number;
}

/** A run in the search results (not the client's `RunSummary`, which `listRuns` returns). */
export interface RunSearchRow {
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** started, completed, failed or cancelled. */
  readonly status: string;
  /** When it started (ISO 8601). */
  readonly startedAt: string;
  /** Seconds from start to its end, or to now while it runs. */
  readonly seconds: number;
  /** The run it retries or resumes, if any. */
  readonly restartOf: string | null;
  /** The runs that retry or resume it, newest first (at most 20). */
  readonly restartedAs: readonly RunRestart[];
}

/** The most runs one search returns. */
export const MAX_SEARCH = 200;

/**
 * Reads the search's filters from a query string (`flow`, `status`, `id`, `limit`); throws a
 * `RangeError` naming the bad value and what is accepted.
 *
 * @example
 * ```ts
 * import { parseRunFilter } from "./search.ts";
 *
 * parseRunFilter(new URLSearchParams("status=failed&id=0b7e")); // { status: "failed", idPrefix: "0b7e", limit: 50 }
 * ```
 */
export function parseRunFilter(params: URLSearchParams): RunSearchFilter {
  const flow = params.get("flow")?.trim() || undefined;
  if (flow !== undefined && !/^[A-Za-z0-9_]{1,128}$/.test(flow)) {
    throw new RangeError(
      `flow must be a flow slug (letters, digits, _), got ${JSON.stringify(flow.slice(0, 140))}`,
    );
  }
  const statusText = params.get("status") || undefined;
  if (statusText !== undefined && !(RUN_STATUSES as readonly string[]).includes(statusText)) {
    throw new RangeError(
      `status must be one of ${RUN_STATUSES.join(", ")}, got ${
        JSON.stringify(statusText.slice(0, 40))
      }`,
    );
  }
  const id = params.get("id")?.trim().toLowerCase() || undefined;
  if (id !== undefined && idBounds(id) === undefined) {
    throw new RangeError(
      `id must be the start of a run id (hex digits and dashes, e.g. 0b7e or 0b7e12ab-4c), got ${
        JSON.stringify(id.slice(0, 40))
      }`,
    );
  }
  const limitText = params.get("limit") ?? "50";
  const limit = Number(limitText);
  if (!/^\d+$/.test(limitText) || limit < 1 || limit > MAX_SEARCH) {
    throw new RangeError(
      `limit must be a whole number from 1 to ${MAX_SEARCH}, got ${
        JSON.stringify(limitText.slice(0, 20))
      }`,
    );
  }
  return { flow, status: statusText as RunStatus | undefined, idPrefix: id, limit };
}

/**
 * The smallest and largest run id starting with `prefix`, so the search reads a range of the
 * primary key instead of every run's id as text; undefined if no UUID starts so.
 */
export function idBounds(prefix: string): [string, string] | undefined {
  const template = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
  if (prefix.length > template.length) return undefined;
  for (let i = 0; i < prefix.length; i++) {
    const ok = template[i] === "-" ? prefix[i] === "-" : /[0-9a-f]/.test(prefix[i]);
    if (!ok) return undefined;
  }
  const pad = (digit: string) => prefix + template.slice(prefix.length).replace(/x/g, digit);
  return [pad("0"), pad("f")];
}

/**
 * Runs matching `filter`, newest first.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { searchRuns } from "./search.ts";
 *
 * // const failed = await readOnly(sql, (tx) => searchRuns(tx, { status: "failed", limit: 50 }));
 * ```
 */
export async function searchRuns(
  tx: ReadTx,
  filter: RunSearchFilter,
): Promise<RunSearchRow[]> {
  const bounds = filter.idPrefix === undefined ? undefined : idBounds(filter.idPrefix);
  const rows = await tx<
    {
      run_id: string;
      flow_slug: string;
      status: string;
      started_at: Date;
      seconds: number;
      restart_of: string | null;
      lineage: boolean;
    }[]
  >`
    select r.run_id::text, r.flow_slug, r.status, r.started_at, ${hasLineage(tx)} as lineage,
           extract(epoch from coalesce(r.completed_at, r.failed_at,
                                       (j ->> 'cancelled_at')::timestamptz, now())
                              - r.started_at)::float8 as seconds,
           j ->> 'restart_of_run_id' as restart_of
    -- The newest matches first, along runs_started_at_idx; only they are turned into JSON.
    from (
      select r.* from pgflow.runs r
      where (${filter.flow ?? null}::text is null or r.flow_slug = ${filter.flow ?? null})
        and (${filter.status ?? null}::text is null or r.status = ${filter.status ?? null})
        and (${bounds?.[0] ?? null}::uuid is null
             or r.run_id between ${bounds?.[0] ?? null}::uuid and ${bounds?.[1] ?? null}::uuid)
      order by r.started_at desc, r.run_id
      limit ${filter.limit}
    ) r
    -- to_jsonb: the lineage and cancel columns read as NULL on a database that predates them.
    cross join lateral (select to_jsonb(r) - 'input' - 'output' as j) x
    order by r.started_at desc, r.run_id`;
  const restarts = await readRestarts(tx, rows.map((r) => r.run_id), rows[0]?.lineage ?? false);
  return rows.map((r) => ({
    runId: r.run_id,
    flowSlug: r.flow_slug,
    status: r.status,
    startedAt: r.started_at.toISOString(),
    seconds: r.seconds,
    restartOf: r.restart_of,
    restartedAs: restarts.get(r.run_id) ?? [],
  }));
}
