/**
 * A run's attempt history for the run view: every attempt that ended other than by completing
 * (`pgflow.task_attempts`: failed, stalled, cancelled, with the error and its stack) and each
 * task's current attempt from `pgflow.step_tasks` (completed, or running now).
 *
 * On a database without `task_attempts` (migrated before issue 30) only the tasks' own rows are
 * shown: the last failure of a task that failed for good, completions and running attempts.
 *
 * @module
 */
import type { AttemptOutcome } from "../../client/types.ts";
import type { ReadTx } from "./read_only.ts";

/** What became of one attempt: an ended one's outcome, `completed`, or `running` (now). */
export type AttemptStatus = AttemptOutcome | "completed" | "running";

/** One attempt of one task. */
export interface AttemptInfo {
  /** The task (0 for a single step; the element's index for a map). */
  readonly taskIndex: number;
  /** 1-based. */
  readonly attempt: number;
  /** The worker that ran it, if known. */
  readonly workerId: string | null;
  /** The function hosting that worker, if its row is still there. */
  readonly functionName: string | null;
  /** When it started (ISO 8601). */
  readonly startedAt: string | null;
  /** When it ended (ISO 8601); `null` while it runs. */
  readonly endedAt: string | null;
  /** What became of it. */
  readonly outcome: AttemptStatus;
  /** The error message (failed, stalled, cancelled). */
  readonly error: string | null;
  /** The handler's stack trace, when it sent one. */
  readonly stack: string | null;
}

const iso = (v: Date | null): string | null => (v === null ? null : v.toISOString());

type Row = {
  step_slug: string;
  task_index: number;
  attempt: number;
  worker_id: string | null;
  function_name: string | null;
  started_at: Date | null;
  ended_at: Date | null;
  outcome: AttemptStatus;
  error: string | null;
  stack: string | null;
  total: number;
};

/**
 * Reads the attempts of every step of `runId`, at most `limit` per step (attempts that did not
 * complete are kept first: they are what a person looks for), each step's in (task, attempt) order.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readAttempts } from "./attempts.ts";
 *
 * // const byStep = await readOnly(sql, (tx) => readAttempts(tx, runId, 100));
 * // byStep.get("charge")?.rows[0].error
 * ```
 */
export async function readAttempts(
  tx: ReadTx,
  runId: string,
  limit: number,
): Promise<Map<string, { rows: AttemptInfo[]; omitted: number }>> {
  const [{ kept }] = await tx<{ kept: boolean }[]>`
    select to_regclass('pgflow.task_attempts') is not null as kept`;
  // The tasks' own rows: the attempt that completed or runs now, and (without the history table,
  // or when it has no row for it) the failure a task ended with.
  const current = tx`
    select t.step_slug, t.task_index, t.attempts_count as attempt, t.last_worker_id as worker_id,
           t.started_at,
           case t.status when 'completed' then t.completed_at when 'failed' then t.failed_at end
             as ended_at,
           case t.status when 'started' then 'running' else t.status end as outcome,
           case when t.status = 'failed' then t.error_message end as error,
           null::text as stack
    from pgflow.step_tasks t
    where t.run_id = ${runId}::uuid and t.attempts_count > 0
      and (t.status in ('completed', 'started')
           or (t.status = 'failed' and ${
    kept
      ? tx`not exists (
                select 1 from pgflow.task_attempts a
                where a.run_id = t.run_id and a.step_slug = t.step_slug
                  and a.task_index = t.task_index and a.attempt = t.attempts_count)`
      : tx`true`
  }))`;
  const ended = kept
    ? tx`
    union all
    select a.step_slug, a.task_index, a.attempt, a.worker_id, a.started_at, a.ended_at,
           a.outcome, a.error_message, a.error_stack
    from pgflow.task_attempts a where a.run_id = ${runId}::uuid`
    : tx``;
  const rows = await tx<Row[]>`
    with attempts as (${current} ${ended}),
    ranked as (
      select a.*, row_number() over (partition by a.step_slug
                                     order by a.outcome = 'completed', a.task_index, a.attempt) as n,
             count(*) over (partition by a.step_slug)::int as total
      from attempts a
    )
    select r.step_slug, r.task_index, r.attempt, r.worker_id::text, w.function_name,
           r.started_at, r.ended_at, r.outcome, r.error, r.stack, r.total
    from ranked r
    left join pgflow.workers w on w.worker_id = r.worker_id
    where r.n <= ${limit}
    order by r.step_slug, r.task_index, r.attempt`;
  const byStep = new Map<string, { rows: AttemptInfo[]; omitted: number }>();
  for (const r of rows) {
    const entry = byStep.get(r.step_slug) ?? { rows: [], omitted: Math.max(0, r.total - limit) };
    entry.rows.push({
      taskIndex: r.task_index,
      attempt: r.attempt,
      workerId: r.worker_id,
      functionName: r.function_name,
      startedAt: iso(r.started_at),
      endedAt: iso(r.ended_at),
      outcome: r.outcome,
      error: r.error,
      stack: r.stack,
    });
    byStep.set(r.step_slug, entry);
  }
  return byStep;
}
