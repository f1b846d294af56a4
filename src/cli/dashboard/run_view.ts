/**
 * One run as the dashboard's run view shows it: its steps in flow order, each with the state a
 * person should see, why it waits (if it does), and its attempt history; the run's lineage.
 *
 * The run's and steps' rows are read through `to_jsonb(row)`, so the columns issue 30 added
 * (`cancelled_at`, `cancel_reason`, `restart_of_run_id`, `restart_mode`, `reused`) read as NULL
 * on a database migrated before them: the dashboard can be newer than the schema it looks at.
 *
 * @module
 */
import type { RunRestart } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";
import { type AttemptInfo, readAttempts } from "./attempts.ts";
import { hasLineage, readRestarts } from "./restarts.ts";
import { type ChildLinks, readChildLinks } from "./children.ts";
import { readWaits, type StepWait } from "./waits.ts";

export type { AttemptInfo } from "./attempts.ts";
export type { StepWait } from "./waits.ts";

/**
 * What the page shows as a step's state: the stored state, except that a step of a finished run
 * that never finished is `not-started` (no task of it ever ran) or `stopped` (a task ran when the
 * run ended), a started step none of whose tasks has been picked up yet is `queued`, and one
 * whose unfinished tasks all wait for a concurrency limit (no message yet) is `waiting`.
 *
 * @example
 * ```ts
 * import type { ShownStepStatus } from "./run_view.ts";
 *
 * const ended = (s: ShownStepStatus) => !["created", "queued", "waiting", "started"].includes(s);
 * ```
 */
export type ShownStepStatus =
  | "created"
  | "queued"
  | "waiting"
  | "started"
  | "completed"
  | "failed"
  | "skipped"
  | "cancelled"
  | "not-started"
  | "stopped";

/** One step of a run. */
export interface RunStep {
  /** The step. */
  readonly stepSlug: string;
  /** Its position in the flow. */
  readonly stepIndex: number;
  /** single or map. */
  readonly stepType: string;
  /** The steps it depends on. */
  readonly deps: readonly string[];
  /** The state to show (see {@link ShownStepStatus}). */
  readonly status: ShownStepStatus;
  /** The state stored in `pgflow.step_states` (`created` when it has no row yet). */
  readonly storedStatus: string;
  /** Completed by a resume from the source run's result, not run again. */
  readonly reused: boolean;
  /** When it started (ISO 8601), if it did. */
  readonly startedAt: string | null;
  /** When it ended (ISO 8601): completed, failed, skipped, cancelled, or its run ended. */
  readonly endedAt: string | null;
  /** Seconds from start to end, or to now while it runs; `null` when no task of it ever ran. */
  readonly seconds: number | null;
  /** Its tasks (one for a single step). */
  readonly tasks: number;
  /** Attempts over all its tasks. */
  readonly attempts: number;
  /** The fewest attempts any one of its tasks has had (0 when one was never taken). */
  readonly minAttempts: number;
  /** The most attempts any one of its tasks has had. */
  readonly maxAttempts: number;
  /** The error it failed with, or the last attempt's error. */
  readonly error: string | null;
  /** Why it was skipped. */
  readonly skipReason: string | null;
  /** The start of its output as JSON text (at most 500 characters), once completed. */
  readonly outputPreview: string | null;
  /** Why it has not finished, while its run is started; empty otherwise. */
  readonly waits: readonly StepWait[];
  /** Its attempts, by task and attempt (at most {@link HISTORY_LIMIT}). */
  readonly history: readonly AttemptInfo[];
  /** Attempts not listed in `history` (over the limit). */
  readonly historyOmitted: number;
}

/** One run with its steps. */
export interface RunDetail {
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** started, completed, failed or cancelled. */
  readonly status: string;
  /** When it started (ISO 8601). */
  readonly startedAt: string;
  /** When it completed, failed or was cancelled (ISO 8601). */
  readonly endedAt: string | null;
  /** Seconds from start to end, or to now while it runs. */
  readonly seconds: number;
  /** The run's error message, if it failed. */
  readonly error: string | null;
  /** Why it was cancelled, if a reason was given. */
  readonly cancelReason: string | null;
  /** The run this one retries or resumes. */
  readonly restartOf: string | null;
  /** `retry` or `resume` when it restarts another run. */
  readonly restartMode: string | null;
  /** Runs that retry or resume this one, newest first (at most 20). */
  readonly restartedAs: readonly RunRestart[];
  /** Its parent and child runs (child flows). */
  readonly links: ChildLinks;
  /** Its steps in flow order. */
  readonly steps: readonly RunStep[];
}

/** How much of a step's output the page shows. */
export const OUTPUT_PREVIEW_CHARS = 500;
/** Attempts listed per step. */
export const HISTORY_LIMIT = 100;

const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));
const FINISHED = new Set(["completed", "failed", "skipped", "cancelled"]);

/**
 * Reads one run, its steps, why each unfinished step waits and every attempt; `undefined` when
 * there is no such run.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readRun } from "./run_view.ts";
 *
 * // const run = await readOnly(sql, (tx) => readRun(tx, "0b7e…", { staleAfterSeconds: 30 }));
 * ```
 */
export async function readRun(
  tx: ReadTx,
  runId: string,
  options: { staleAfterSeconds: number } = { staleAfterSeconds: 30 },
): Promise<RunDetail | undefined> {
  const [run] = await tx<
    {
      run_id: string;
      flow_slug: string;
      status: string;
      started_at: Date;
      ended_at: Date | null;
      seconds: number;
      error: string | null;
      cancel_reason: string | null;
      restart_of: string | null;
      restart_mode: string | null;
      lineage: boolean;
      now: Date;
    }[]
  >`
    select now() as now, ${hasLineage(tx)} as lineage,
           r.run_id::text, r.flow_slug, r.status, r.started_at, r.error_message as error,
           e.ended_at,
           extract(epoch from coalesce(e.ended_at, now()) - r.started_at)::float8 as seconds,
           j ->> 'cancel_reason' as cancel_reason,
           j ->> 'restart_of_run_id' as restart_of,
           j ->> 'restart_mode' as restart_mode
    from pgflow.runs r
    cross join lateral (select to_jsonb(r) - 'input' - 'output' as j) x
    cross join lateral (
      select coalesce(r.completed_at, r.failed_at, (j ->> 'cancelled_at')::timestamptz) as ended_at
    ) e
    where r.run_id = ${runId}::uuid`;
  if (run === undefined) return undefined;
  const restarts = (await readRestarts(tx, [runId], run.lineage)).get(runId) ?? [];
  const links = await readChildLinks(tx, runId);
  const steps = await tx<
    {
      step_slug: string;
      step_index: number;
      step_type: string;
      deps: string[];
      status: string | null;
      reused: boolean;
      started_at: Date | null;
      ended_at: Date | null;
      tasks: number;
      attempts: number;
      min_attempts: number;
      max_attempts: number;
      ran: number;
      running: number;
      waiting: number;
      open: number;
      waits_in_sql: boolean;
      error: string | null;
      skip_reason: string | null;
      output: string | null;
    }[]
  >`
    select s.step_slug, s.step_index, s.step_type,
           coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps d
                     where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
                    '{}') as deps,
           ss.status, coalesce((j ->> 'reused')::boolean, false) as reused, ss.started_at,
           coalesce(ss.completed_at, ss.failed_at, ss.skipped_at,
                    (j ->> 'cancelled_at')::timestamptz) as ended_at,
           coalesce(t.tasks, 0)::int as tasks, coalesce(t.attempts, 0)::int as attempts,
           coalesce(t.min_attempts, 0)::int as min_attempts,
           coalesce(t.max_attempts, 0)::int as max_attempts,
           coalesce(t.ran, 0)::int as ran, coalesce(t.running, 0)::int as running,
           coalesce(t.waiting, 0)::int as waiting, coalesce(t.open, 0)::int as open,
           (j ->> 'waiting_for') is not null as waits_in_sql,
           coalesce(ss.error_message, t.last_error) as error, ss.skip_reason,
           case when ss.status = 'completed'
                then left(ss.output::text, ${OUTPUT_PREVIEW_CHARS + 1}) end as output
    from pgflow.steps s
    left join pgflow.step_states ss on ss.run_id = ${runId}::uuid and ss.step_slug = s.step_slug
    left join lateral (select to_jsonb(ss) - 'output' as j) x on true
    left join lateral (
      select count(*) as tasks, sum(st.attempts_count) as attempts,
             min(st.attempts_count) as min_attempts, max(st.attempts_count) as max_attempts,
             -- A task ran if a worker ever took it: it has an attempt.
             count(*) filter (where st.attempts_count > 0) as ran,
             count(*) filter (where st.status in ('started', 'completed')) as running,
             count(*) filter (where st.status = 'waiting') as waiting,
             count(*) filter (where st.status in ('waiting', 'queued', 'started')) as open,
             (array_agg(st.error_message order by st.failed_at desc nulls last)
                filter (where st.error_message is not null))[1] as last_error
      from pgflow.step_tasks st where st.run_id = ${runId}::uuid and st.step_slug = s.step_slug
    ) t on true
    where s.flow_slug = ${run.flow_slug}
    order by s.step_index`;
  const runStarted = run.status === "started";
  const waits = runStarted
    ? await readWaits(tx, runId, run.flow_slug, options.staleAfterSeconds)
    : new Map<string, StepWait[]>();
  const history = await readAttempts(tx, runId, HISTORY_LIMIT);
  const runEnd = run.ended_at === null ? null : run.ended_at.getTime();
  // The database's clock, as for the run's own seconds: the dashboard's host may disagree.
  const now = run.now.getTime();
  return {
    runId: run.run_id,
    flowSlug: run.flow_slug,
    status: run.status,
    startedAt: iso(run.started_at),
    endedAt: run.ended_at === null ? null : iso(run.ended_at),
    seconds: run.seconds,
    error: run.error,
    cancelReason: run.cancel_reason,
    restartOf: run.restart_of,
    restartMode: run.restart_mode,
    restartedAs: restarts,
    links,
    steps: steps.map((s) => {
      const stored = s.status ?? "created";
      let status = stored as ShownStepStatus;
      let endedAt = s.ended_at;
      if (!runStarted && !FINISHED.has(stored)) {
        // The run ended around it (a sibling failed): its clock stops with the run's, and a step
        // no worker ever took is not shown as running.
        status = s.ran > 0 ? "stopped" : "not-started";
        endedAt = s.ran > 0 && run.ended_at !== null ? run.ended_at : null;
      } else if (stored === "started" && s.waiting > 0 && s.waiting === s.open) {
        status = "waiting";
      } else if (stored === "started" && s.waits_in_sql) {
        // An event step or a sleep (docs/waiting.md): no task, nothing queued.
        status = "waiting";
      } else if (stored === "started" && s.running === 0 && s.ran === 0) {
        status = "queued";
      }
      const began = s.started_at === null ? null : s.started_at.getTime();
      const end = endedAt?.getTime() ?? (runStarted ? now : runEnd);
      const seconds = began === null || status === "not-started" || end === null
        ? null
        : Math.max(0, (end - began) / 1000);
      const h = history.get(s.step_slug) ?? { rows: [], omitted: 0 };
      return {
        stepSlug: s.step_slug,
        stepIndex: s.step_index,
        stepType: s.step_type,
        deps: s.deps,
        status,
        storedStatus: stored,
        reused: s.reused,
        startedAt: s.started_at === null ? null : iso(s.started_at),
        endedAt: endedAt === null ? null : iso(endedAt),
        seconds,
        tasks: s.tasks,
        attempts: s.attempts,
        minAttempts: s.min_attempts,
        maxAttempts: s.max_attempts,
        error: s.error,
        skipReason: s.skip_reason,
        outputPreview: s.output === null
          ? null
          : s.output.length > OUTPUT_PREVIEW_CHARS
          ? `${s.output.slice(0, OUTPUT_PREVIEW_CHARS)}…`
          : s.output,
        waits: waits.get(s.step_slug) ?? [],
        history: h.rows,
        historyOmitted: h.omitted,
      };
    }),
  };
}
