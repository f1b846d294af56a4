/**
 * What the dashboard shows, read from the engine's tables and PGMQ's public functions. Every
 * function here takes the handle of a read-only transaction (see `read_only.ts`), never a pool.
 *
 * @module
 */
import { type CoverageRow, queueCoverage } from "../../operations/coverage.ts";
import { type QueueDepth, queueDepths } from "../../operations/queue_depths.ts";
import { type AliasInfo, readAliases } from "../deploy/aliases.ts";
import type { RunRestart } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";
import { hasLineage, readRestarts } from "./restarts.ts";
import { readSchedules, type ScheduleInfo } from "./schedules.ts";

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
  /** Runs that were cancelled. */
  readonly cancelled: number;
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
  /** The runs that retried or resumed its run since, newest first (at most 20). */
  readonly restartedAs: readonly RunRestart[];
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
  /** The most recent failed steps first. */
  readonly failures: readonly FailureInfo[];
  /** Stuck tasks, oldest first. */
  readonly stuck: readonly StuckTask[];
  /** Live workers by queue, function, worker. */
  readonly workers: readonly WorkerInfo[];
  /** Aliases by name: the version each starts, and the versions that carry it. */
  readonly aliases: readonly AliasInfo[];
  /** Schedules by name: timing, next and last tick, last run, skipped ticks. */
  readonly schedules: readonly ScheduleInfo[];
}

/** A live worker. */
export interface WorkerInfo {
  /** The worker. */
  readonly workerId: string;
  /** The queue it reads. */
  readonly queueName: string;
  /** The function hosting it. */
  readonly functionName: string;
  /** How many (flow, step) pairs it has handlers for. */
  readonly pairs: number;
  /** When it started (ISO 8601). */
  readonly startedAt: string;
  /** Seconds since its last heartbeat. */
  readonly heartbeatSeconds: number;
  /** Tasks it holds now (started, in started runs). */
  readonly inFlight: number;
  /** It was deprecated by a deploy fence: it finishes its tasks and takes no new ones. */
  readonly deprecated: boolean;
}

const iso = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));

/**
 * Reads the overview: queues, coverage, run counts, recent failures, stuck tasks, live workers,
 * aliases, schedules.
 * (The runs themselves are searched: `search.ts`.)
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
    failures: await readFailures(tx, options.limit),
    stuck: await readStuck(tx, options),
    workers: await readWorkers(tx, options.staleAfterSeconds),
    aliases: await readAliases(tx),
    schedules: await readSchedules(tx),
  };
}

async function readWorkers(tx: ReadTx, staleAfter: number): Promise<WorkerInfo[]> {
  // Live as everywhere else (queue_depths, coverage): not stopped, a recent heartbeat. Deprecated
  // workers are listed too, marked: they still hold tasks while they drain.
  const rows = await tx<
    {
      worker_id: string;
      queue_name: string;
      function_name: string;
      pairs: number;
      started_at: Date;
      heartbeat: number;
      in_flight: number;
      deprecated: boolean;
    }[]
  >`
    select w.worker_id::text, w.queue_name, w.function_name,
           case when jsonb_typeof(w.supported) = 'array'
                then jsonb_array_length(w.supported) else 0 end as pairs,
           w.started_at,
           greatest(0, extract(epoch from now() - w.last_heartbeat_at))::float8 as heartbeat,
           coalesce(h.n, 0)::int as in_flight,
           w.deprecated_at is not null as deprecated
    from pgflow.workers w
    -- One pass over the started tasks (step_tasks_started_idx), not one per worker.
    left join (
      select t.last_worker_id, count(*) as n from pgflow.step_tasks t
      join pgflow.runs r on r.run_id = t.run_id and r.status = 'started'
      where t.status = 'started' and t.started_at is not null
      group by t.last_worker_id
    ) h on h.last_worker_id = w.worker_id
    where w.stopped_at is null
      and w.last_heartbeat_at > now() - make_interval(secs => ${staleAfter})
    order by w.queue_name, w.function_name, w.started_at, w.worker_id`;
  return rows.map((r) => ({
    workerId: r.worker_id,
    queueName: r.queue_name,
    functionName: r.function_name,
    pairs: r.pairs,
    startedAt: iso(r.started_at),
    heartbeatSeconds: r.heartbeat,
    inFlight: r.in_flight,
    deprecated: r.deprecated,
  }));
}

async function readQueues(tx: ReadTx, staleAfter: number): Promise<QueueInfo[]> {
  return await queueDepths(tx, staleAfter);
}

async function readCoverage(tx: ReadTx, staleAfter: number): Promise<CoverageInfo[]> {
  return await queueCoverage(tx, undefined, staleAfter);
}

async function readRunCounts(tx: ReadTx): Promise<RunCounts[]> {
  const rows = await tx<
    { flow_slug: string; started: number; completed: number; failed: number; cancelled: number }[]
  >`
    select flow_slug,
           count(*) filter (where status = 'started')::int as started,
           count(*) filter (where status = 'completed')::int as completed,
           count(*) filter (where status = 'failed')::int as failed,
           count(*) filter (where status = 'cancelled')::int as cancelled
    from pgflow.runs group by flow_slug order by flow_slug`;
  return rows.map((r) => ({
    flowSlug: r.flow_slug,
    started: r.started,
    completed: r.completed,
    failed: r.failed,
    cancelled: r.cancelled,
  }));
}

async function readFailures(tx: ReadTx, limit: number): Promise<FailureInfo[]> {
  const rows = await tx<
    {
      run_id: string;
      flow_slug: string;
      step_slug: string;
      failed_at: Date;
      error: string;
      lineage: boolean;
    }[]
  >`
    select run_id::text, flow_slug, step_slug, failed_at, coalesce(error_message, '') as error,
           ${hasLineage(tx)} as lineage
    from pgflow.step_states where status = 'failed'
    order by failed_at desc nulls last, run_id, step_slug limit ${limit}`;
  const restarts = await readRestarts(tx, rows.map((r) => r.run_id), rows[0]?.lineage ?? false);
  return rows.map((r) => ({
    runId: r.run_id,
    flowSlug: r.flow_slug,
    stepSlug: r.step_slug,
    failedAt: iso(r.failed_at),
    error: r.error,
    restartedAs: restarts.get(r.run_id) ?? [],
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
