/**
 * What the dashboard shows, read from the engine's tables and PGMQ's public functions. Every
 * function here takes the handle of a read-only transaction (see `read_only.ts`), never a pool.
 *
 * @module
 */
import { type CoverageRow, queueCoverage } from "../../operations/coverage.ts";
import { type QueueDepth, queueDepths } from "../../operations/queue_depths.ts";
import type { ReadTx } from "./read_only.ts";

/** Thresholds of the overview. */
export interface OverviewOptions {
  /** A worker is live if it sent a heartbeat this many seconds ago at most. */
  readonly staleAfterSeconds: number;
  /** A queued task older than this many seconds is listed as stuck. */
  readonly queuedAfterSeconds: number;
  /** How many recent runs and failures to list. */
  readonly limit: number;
}

/** One PGMQ queue and the live workers reading it. */
export type QueueInfo = QueueDepth;

/** One (queue, flow, step) pair of `pgflow.queue_coverage()`, as the engine reads it. */
export type CoverageInfo = CoverageRow;

/** Runs of one flow by status. */
export interface RunCounts {
  /** The flow. */
  readonly flowSlug: string;
  /** Runs in progress. */
  readonly started: number;
  /** Runs that completed. */
  readonly completed: number;
  /** Runs that failed. */
  readonly failed: number;
}

/** A run in the list of recent runs. */
export interface RunSummary {
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** started, completed or failed. */
  readonly status: string;
  /** When it started (ISO 8601). */
  readonly startedAt: string;
  /** Seconds from start to its end, or to now while it runs. */
  readonly seconds: number;
}

/** A failed step of a run. */
export interface FailureInfo {
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** The step that failed. */
  readonly stepSlug: string;
  /** When (ISO 8601). */
  readonly failedAt: string;
  /** The stored error message. */
  readonly error: string;
}

/** Why a task is listed as stuck. */
export type StuckReason = "past timeout" | "stale worker" | "queued too long";

/** A task that should have moved by now. */
export interface StuckTask {
  /** Why it is listed. */
  readonly reason: StuckReason;
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** The step. */
  readonly stepSlug: string;
  /** The task's index (map steps have several). */
  readonly taskIndex: number;
  /** The queue its message is on. */
  readonly queueName: string;
  /** Seconds since it was started (started tasks) or queued (queued tasks). */
  readonly seconds: number;
  /** The step's effective timeout in seconds. */
  readonly timeoutSeconds: number;
  /** The worker holding it, if any. */
  readonly workerId: string | null;
  /** Seconds since that worker's last heartbeat, if known. */
  readonly heartbeatSeconds: number | null;
}

/** Everything the overview page shows. */
export interface Overview {
  /** The database's clock (ISO 8601). */
  readonly now: string;
  /** Queues by name. */
  readonly queues: readonly QueueInfo[];
  /** Coverage pairs by queue, flow, step. */
  readonly coverage: readonly CoverageInfo[];
  /** Run counts by flow. */
  readonly runCounts: readonly RunCounts[];
  /** The most recent runs first. */
  readonly recentRuns: readonly RunSummary[];
  /** The most recent failed steps first. */
  readonly failures: readonly FailureInfo[];
  /** Stuck tasks, oldest first. */
  readonly stuck: readonly StuckTask[];
}

const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));

/**
 * Reads the overview: queues, coverage, run counts, recent runs and failures, stuck tasks.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readOverview } from "./queries.ts";
 *
 * // const overview = await readOnly(sql, (tx) => readOverview(tx, { staleAfterSeconds: 30, queuedAfterSeconds: 60, limit: 20 }));
 * ```
 */
export async function readOverview(tx: ReadTx, options: OverviewOptions): Promise<Overview> {
  const [{ now }] = await tx<{ now: Date }[]>`select now() as now`;
  return {
    now: iso(now),
    queues: await readQueues(tx, options.staleAfterSeconds),
    coverage: await readCoverage(tx, options.staleAfterSeconds),
    runCounts: await readRunCounts(tx),
    recentRuns: await readRecentRuns(tx, options.limit),
    failures: await readFailures(tx, options.limit),
    stuck: await readStuck(tx, options),
  };
}

async function readQueues(tx: ReadTx, staleAfter: number): Promise<QueueInfo[]> {
  return await queueDepths(tx, staleAfter);
}

async function readCoverage(tx: ReadTx, staleAfter: number): Promise<CoverageInfo[]> {
  return await queueCoverage(tx, undefined, staleAfter);
}

async function readRunCounts(tx: ReadTx): Promise<RunCounts[]> {
  const rows = await tx<
    { flow_slug: string; started: number; completed: number; failed: number }[]
  >`
    select flow_slug,
           count(*) filter (where status = 'started')::int as started,
           count(*) filter (where status = 'completed')::int as completed,
           count(*) filter (where status = 'failed')::int as failed
    from pgflow.runs group by flow_slug order by flow_slug`;
  return rows.map((r) => ({
    flowSlug: r.flow_slug,
    started: r.started,
    completed: r.completed,
    failed: r.failed,
  }));
}

async function readRecentRuns(tx: ReadTx, limit: number): Promise<RunSummary[]> {
  const rows = await tx<
    { run_id: string; flow_slug: string; status: string; started_at: Date; seconds: number }[]
  >`
    select run_id::text, flow_slug, status, started_at,
           extract(epoch from coalesce(completed_at, failed_at, now()) - started_at)::float8
             as seconds
    from pgflow.runs order by started_at desc, run_id limit ${limit}`;
  return rows.map((r) => ({
    runId: r.run_id,
    flowSlug: r.flow_slug,
    status: r.status,
    startedAt: iso(r.started_at),
    seconds: r.seconds,
  }));
}

async function readFailures(tx: ReadTx, limit: number): Promise<FailureInfo[]> {
  const rows = await tx<
    { run_id: string; flow_slug: string; step_slug: string; failed_at: Date; error: string }[]
  >`
    select run_id::text, flow_slug, step_slug, failed_at, coalesce(error_message, '') as error
    from pgflow.step_states where status = 'failed'
    order by failed_at desc nulls last, run_id, step_slug limit ${limit}`;
  return rows.map((r) => ({
    runId: r.run_id,
    flowSlug: r.flow_slug,
    stepSlug: r.step_slug,
    failedAt: iso(r.failed_at),
    error: r.error,
  }));
}

async function readStuck(tx: ReadTx, options: OverviewOptions): Promise<StuckTask[]> {
  // Started tasks past their step's timeout, or held by a worker that went silent or is gone; queued tasks waiting longer than the threshold. Only tasks of started runs: a finished
  // run's leftovers are history, not work.
  const rows = await tx<
    {
      reason: StuckReason;
      run_id: string;
      flow_slug: string;
      step_slug: string;
      task_index: number;
      queue_name: string;
      seconds: number;
      timeout: number;
      worker_id: string | null;
      heartbeat: number | null;
    }[]
  >`
    with candidates as (
      select t.run_id, t.flow_slug, t.step_slug, t.task_index, t.queue_name, t.status,
             extract(epoch from now() - coalesce(t.started_at, t.queued_at))::float8 as seconds,
             coalesce(s.opt_timeout, f.opt_timeout) as timeout,
             t.last_worker_id, w.worker_id as known_worker,
             -- The heartbeat, not stopped_at: a stopping worker still beats while it drains.
             w.last_heartbeat_at <= now() - make_interval(secs => ${options.staleAfterSeconds})
               as worker_stale,
             -- now() is the transaction's start; a heartbeat since then is 0 s old, not less.
             greatest(0, extract(epoch from now() - w.last_heartbeat_at))::float8 as heartbeat
      from pgflow.step_tasks t
      join pgflow.runs r on r.run_id = t.run_id and r.status = 'started'
      join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
      join pgflow.flows f on f.flow_slug = t.flow_slug
      left join pgflow.workers w on w.worker_id = t.last_worker_id
      where t.status in ('queued', 'started')
    )
    select case
             when status = 'queued' then 'queued too long'
             when known_worker is null or worker_stale then 'stale worker'
             else 'past timeout'
           end as reason,
           run_id::text, flow_slug, step_slug, task_index, queue_name, seconds, timeout,
           last_worker_id::text as worker_id, heartbeat
    from candidates
    where (status = 'queued' and seconds > ${options.queuedAfterSeconds})
       or (status = 'started' and (seconds > timeout or known_worker is null or worker_stale))
    order by seconds desc, run_id, step_slug, task_index
    limit ${options.limit}`;
  return rows.map((r) => ({
    reason: r.reason,
    runId: r.run_id,
    flowSlug: r.flow_slug,
    stepSlug: r.step_slug,
    taskIndex: r.task_index,
    queueName: r.queue_name,
    seconds: r.seconds,
    timeoutSeconds: r.timeout,
    workerId: r.worker_id,
    heartbeatSeconds: r.heartbeat,
  }));
}

/** One step of a run, for the DAG. */
export interface RunStep {
  /** The step. */
  readonly stepSlug: string;
  /** Its position in the flow. */
  readonly stepIndex: number;
  /** single or map. */
  readonly stepType: string;
  /** The steps it depends on. */
  readonly deps: readonly string[];
  /** created, started, completed, failed or skipped. */
  readonly status: string;
  /** When it started (ISO 8601), if it did. */
  readonly startedAt: string | null;
  /** When it completed, failed or was skipped (ISO 8601), if it did. */
  readonly endedAt: string | null;
  /** Seconds from start to end, or to now while it runs; `null` before it starts. */
  readonly seconds: number | null;
  /** Its tasks (one for a single step). */
  readonly tasks: number;
  /** Attempts over all its tasks. */
  readonly attempts: number;
  /** The error it failed with, or the last attempt's error. */
  readonly error: string | null;
  /** Why it was skipped. */
  readonly skipReason: string | null;
  /** The start of its output as JSON text (at most 500 characters), once completed. */
  readonly outputPreview: string | null;
}

/** One run with its steps. */
export interface RunDetail {
  /** The run. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** started, completed or failed. */
  readonly status: string;
  /** When it started (ISO 8601). */
  readonly startedAt: string;
  /** Seconds from start to end, or to now while it runs. */
  readonly seconds: number;
  /** The run's error message, if it failed. */
  readonly error: string | null;
  /** Its steps in flow order. */
  readonly steps: readonly RunStep[];
}

/** How much of a step's output the page shows. */
export const OUTPUT_PREVIEW_CHARS = 500;

/**
 * Reads one run and its steps; `undefined` when there is no such run.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readRun } from "./queries.ts";
 *
 * // const run = await readOnly(sql, (tx) => readRun(tx, "0b7e…"));
 * ```
 */
export async function readRun(tx: ReadTx, runId: string): Promise<RunDetail | undefined> {
  const [run] = await tx<
    {
      run_id: string;
      flow_slug: string;
      status: string;
      started_at: Date;
      seconds: number;
      error: string | null;
    }[]
  >`
    select run_id::text, flow_slug, status, started_at, error_message as error,
           extract(epoch from coalesce(completed_at, failed_at, now()) - started_at)::float8
             as seconds
    from pgflow.runs where run_id = ${runId}::uuid`;
  if (run === undefined) return undefined;
  const steps = await tx<
    {
      step_slug: string;
      step_index: number;
      step_type: string;
      deps: string[];
      status: string | null;
      started_at: Date | null;
      ended_at: Date | null;
      seconds: number | null;
      tasks: number;
      attempts: number;
      error: string | null;
      skip_reason: string | null;
      output: string | null;
    }[]
  >`
    select s.step_slug, s.step_index, s.step_type,
           coalesce((select array_agg(d.dep_slug order by d.dep_slug) from pgflow.deps d
                     where d.flow_slug = s.flow_slug and d.step_slug = s.step_slug),
                    '{}') as deps,
           ss.status, ss.started_at,
           coalesce(ss.completed_at, ss.failed_at, ss.skipped_at) as ended_at,
           extract(epoch from coalesce(ss.completed_at, ss.failed_at, ss.skipped_at, now())
                   - ss.started_at)::float8 as seconds,
           coalesce(t.tasks, 0)::int as tasks, coalesce(t.attempts, 0)::int as attempts,
           coalesce(ss.error_message, t.last_error) as error, ss.skip_reason,
           case when ss.status = 'completed'
                then left(ss.output::text, ${OUTPUT_PREVIEW_CHARS + 1}) end as output
    from pgflow.steps s
    left join pgflow.step_states ss on ss.run_id = ${runId}::uuid and ss.step_slug = s.step_slug
    left join lateral (
      select count(*) as tasks, sum(st.attempts_count) as attempts,
             (array_agg(st.error_message order by st.failed_at desc nulls last)
                filter (where st.error_message is not null))[1] as last_error
      from pgflow.step_tasks st where st.run_id = ${runId}::uuid and st.step_slug = s.step_slug
    ) t on true
    where s.flow_slug = ${run.flow_slug}
    order by s.step_index`;
  return {
    runId: run.run_id,
    flowSlug: run.flow_slug,
    status: run.status,
    startedAt: iso(run.started_at),
    seconds: run.seconds,
    error: run.error,
    steps: steps.map((s) => ({
      stepSlug: s.step_slug,
      stepIndex: s.step_index,
      stepType: s.step_type,
      deps: s.deps,
      status: s.status ?? "created",
      startedAt: s.started_at === null ? null : iso(s.started_at),
      endedAt: s.ended_at === null ? null : iso(s.ended_at),
      seconds: s.started_at === null ? null : s.seconds,
      tasks: s.tasks,
      attempts: s.attempts,
      error: s.error,
      skipReason: s.skip_reason,
      outputPreview: s.output === null
        ? null
        : s.output.length > OUTPUT_PREVIEW_CHARS
        ? `${s.output.slice(0, OUTPUT_PREVIEW_CHARS)}…`
        : s.output,
    })),
  };
}
