/**
 * Why each unfinished step of a started run has not finished: the dependencies it waits for; its
 * tasks waiting for a concurrency limit (and why); its queued tasks and whether any live worker serves them (`pgflow.queue_coverage`, the verdict the
 * coverage check and `pgflow status` give); a message hidden until a retry's backoff or a start
 * delay is over (the message's visibility time in its PGMQ queue); the worker running a task.
 *
 * @module
 */
import { type CoverageRow, queueCoverage } from "../../operations/coverage.ts";
import type { ReadTx } from "./read_only.ts";

/**
 * One reason a step waits; `tasks` counts the step's tasks it applies to (a map has several).
 *
 * - `dependencies`: the step starts once these steps finish.
 * - `unserved`: its tasks are visible on `queue`, but no live worker has a handler for the pair.
 * - `queued`: visible on `queue` and served by `liveWorkers` live workers: it waits its turn.
 *   On both, `delayUnavailable` says why it could not be told whether they are `delayed` instead
 *   (the dashboard's role may not read the queue table's visibility times, or the table lacks
 *   them); absent when it could.
 * - `delayed`: hidden until `until`: a retry's backoff (`retry`), or the step's start delay.
 * - `running`: a worker took it at `since`; `workerLive` is false once its heartbeat went silent.
 * - `capacity`: waiting for a concurrency limit since `since` (no message yet: neither queued nor
 *   lost); `reason` says which and how full (`concurrency slack-api key C042: 1 of 1 in flight`).
 * - `event`: an event step waiting for `event` (with correlation key `key`) since `since`, until
 *   its timeout `until` (`null`: none); `sleep`: a sleep until `until`. No task and no message
 *   (docs/waiting.md): nothing for a worker to do.
 *
 * @example
 * ```ts
 * import type { StepWait } from "./waits.ts";
 *
 * const blocked = (w: StepWait) => w.kind === "unserved";
 * ```
 */
export type StepWait =
  | { readonly kind: "dependencies"; readonly deps: readonly string[] }
  | {
    readonly kind: "unserved";
    readonly queue: string;
    readonly flowSlug: string;
    readonly stepSlug: string;
    readonly tasks: number;
    readonly delayUnavailable?: string;
  }
  | {
    readonly kind: "queued";
    readonly queue: string;
    readonly liveWorkers: number;
    readonly tasks: number;
    readonly delayUnavailable?: string;
  }
  | {
    readonly kind: "delayed";
    readonly queue: string;
    readonly until: string;
    readonly retry: boolean;
    readonly tasks: number;
  }
  | {
    readonly kind: "capacity";
    readonly since: string;
    readonly reason: string;
    readonly tasks: number;
  }
  | {
    readonly kind: "event";
    readonly event: string;
    readonly key: string | null;
    readonly since: string;
    readonly until: string | null;
    readonly tasks: number;
  }
  | {
    readonly kind: "sleep";
    readonly since: string;
    readonly until: string;
    readonly tasks: number;
  }
  | {
    readonly kind: "running";
    readonly workerId: string | null;
    readonly since: string;
    readonly workerLive: boolean;
    readonly tasks: number;
  };

type TaskRow = {
  step_slug: string;
  flow_slug: string;
  status: "queued" | "started";
  queue_name: string;
  message_id: string | null;
  attempts: number;
  worker_id: string | null;
  started_at: Date | null;
  worker_live: boolean;
};

/**
 * Reads why each unfinished step of the started run `runId` waits, by step slug.
 *
 * @example
 * ```ts
 * import { readOnly } from "./read_only.ts";
 * import { readWaits } from "./waits.ts";
 *
 * // const waits = await readOnly(sql, (tx) => readWaits(tx, runId, "order_shipping", 30));
 * // waits.get("ship") // [{ kind: "unserved", queue: "shipping", … }]
 * ```
 */
export async function readWaits(
  tx: ReadTx,
  runId: string,
  flowSlug: string,
  staleAfterSeconds: number,
): Promise<Map<string, StepWait[]>> {
  const waits = new Map<string, StepWait[]>();
  const add = (step: string, wait: StepWait) => waits.set(step, [...waits.get(step) ?? [], wait]);

  const blocked = await tx<{ step_slug: string; deps: string[] }[]>`
    select s.step_slug,
           array_agg(d.dep_slug order by d.dep_slug)
             filter (where coalesce(ds.status, 'created') not in ('completed', 'skipped')) as deps
    from pgflow.steps s
    left join pgflow.step_states ss on ss.run_id = ${runId}::uuid and ss.step_slug = s.step_slug
    join pgflow.deps d on d.flow_slug = s.flow_slug and d.step_slug = s.step_slug
    left join pgflow.step_states ds on ds.run_id = ${runId}::uuid and ds.step_slug = d.dep_slug
    where s.flow_slug = ${flowSlug} and coalesce(ss.status, 'created') = 'created'
    group by s.step_slug`;
  for (const b of blocked) {
    if (b.deps !== null && b.deps.length > 0) {
      add(b.step_slug, { kind: "dependencies", deps: b.deps });
    }
  }

  // A task with a not_before waits for its rate limit, any other for its concurrency limit: the
  // same grouping and reason as pgflow.waiting_tasks.
  const held = await tx<{ step_slug: string; n: number; since: Date; reason: string }[]>`
    select w.step_slug, w.n, w.since, y.reason
    from (select t.step_slug, t.not_before is not null as rate,
                 case when t.not_before is not null then t.rate_scope else t.limit_scope end as scope,
                 case when t.not_before is not null then t.rate_key else t.limit_key end as key,
                 count(*)::int as n, min(t.queued_at) as since, min(t.not_before) as next_at
          from pgflow.step_tasks t where t.run_id = ${runId}::uuid and t.status = 'waiting'
          group by 1, 2, 3, 4) w
    cross join lateral pgflow._waiting_why(w.rate, w.scope, w.key, w.next_at) y
    order by w.step_slug, w.since, w.scope, w.key`;
  for (const w of held) {
    add(w.step_slug, {
      kind: "capacity",
      since: w.since.toISOString(),
      reason: w.reason,
      tasks: w.n,
    });
  }

  const waiting = await tx<
    {
      step_slug: string;
      kind: string;
      event: string;
      key: string | null;
      since: Date;
      until: Date | null;
    }[]
  >`
    select ss.step_slug, s.kind, ss.waiting_for as event, ss.wait_key as key, ss.started_at as since,
           ss.wait_until as until
    from pgflow.step_states ss
    join pgflow.steps s on s.flow_slug = ss.flow_slug and s.step_slug = ss.step_slug
    where ss.run_id = ${runId}::uuid and ss.status = 'started' and ss.waiting_for is not null
    order by ss.step_slug`;
  for (const w of waiting) {
    const since = w.since.toISOString();
    add(
      w.step_slug,
      w.kind === "sleep" && w.until !== null
        ? { kind: "sleep", since, until: w.until.toISOString(), tasks: 1 }
        : {
          kind: "event",
          event: w.event,
          key: w.key,
          since,
          until: w.until === null ? null : w.until.toISOString(),
          tasks: 1,
        },
    );
  }

  const tasks = await tx<TaskRow[]>`
    select t.step_slug, t.flow_slug, t.status, t.queue_name, t.message_id::text,
           t.attempts_count as attempts, t.last_worker_id::text as worker_id, t.started_at,
           coalesce(w.stopped_at is null
                    and w.last_heartbeat_at > now() - make_interval(secs => ${staleAfterSeconds}),
                    false) as worker_live
    from pgflow.step_tasks t
    left join pgflow.workers w on w.worker_id = t.last_worker_id
    where t.run_id = ${runId}::uuid and t.status in ('queued', 'started')
    order by t.step_slug, t.task_index`;
  if (tasks.length === 0) return waits;

  const queued = tasks.filter((t) => t.status === "queued");
  const { times: visibleAt, unavailable } = await messageTimes(tx, queued);
  const coverage = new Map<string, CoverageRow>();
  for (const queue of new Set(queued.map((t) => t.queue_name))) {
    for (const row of await queueCoverage(tx, queue, staleAfterSeconds)) {
      coverage.set(`${row.queueName}\u001f${row.flowSlug}\u001f${row.stepSlug}`, row);
    }
  }
  const [{ now }] = await tx<{ now: Date }[]>`select now() as now`;

  // Grouped per step: one line per reason (per worker for running tasks), counting its tasks.
  const groups = new Map<string, { step: string; wait: StepWait }>();
  const bump = (
    key: string,
    step: string,
    make: () => StepWait,
    merge: (w: StepWait) => StepWait,
  ) => {
    const g = groups.get(key);
    groups.set(key, { step, wait: g === undefined ? make() : merge(g.wait) });
  };
  for (const t of tasks) {
    const key = `${t.step_slug}\u001f`;
    if (t.status === "started") {
      const since = (t.started_at ?? now).toISOString();
      bump(
        `${key}running\u001f${t.worker_id}`,
        t.step_slug,
        () => ({
          kind: "running",
          workerId: t.worker_id,
          since,
          workerLive: t.worker_live,
          tasks: 1,
        }),
        (w) =>
          w.kind === "running"
            ? { ...w, since: since < w.since ? since : w.since, tasks: w.tasks + 1 }
            : w,
      );
      continue;
    }
    const vt = t.message_id === null
      ? undefined
      : visibleAt.get(`${t.queue_name}\u001f${t.message_id}`);
    if (vt !== undefined && vt > now) {
      const until = vt.toISOString();
      bump(
        `${key}delayed\u001f${t.queue_name}`,
        t.step_slug,
        () => ({ kind: "delayed", queue: t.queue_name, until, retry: t.attempts > 0, tasks: 1 }),
        (w) =>
          w.kind === "delayed"
            ? {
              ...w,
              until: until < w.until ? until : w.until,
              retry: w.retry || t.attempts > 0,
              tasks: w.tasks + 1,
            }
            : w,
      );
      continue;
    }
    const pair = coverage.get(`${t.queue_name}\u001f${t.flow_slug}\u001f${t.step_slug}`);
    const served = pair?.served ?? false;
    const reason = unavailable.get(t.queue_name);
    const note = reason === undefined ? {} : { delayUnavailable: reason };
    bump(
      `${key}${served ? "queued" : "unserved"}\u001f${t.queue_name}`,
      t.step_slug,
      () =>
        served
          ? {
            kind: "queued",
            queue: t.queue_name,
            liveWorkers: pair?.liveWorkers ?? 0,
            tasks: 1,
            ...note,
          }
          : {
            kind: "unserved",
            queue: t.queue_name,
            flowSlug: t.flow_slug,
            stepSlug: t.step_slug,
            tasks: 1,
            ...note,
          },
      (w) => (w.kind === "queued" || w.kind === "unserved") ? { ...w, tasks: w.tasks + 1 } : w,
    );
  }
  for (const { step, wait } of groups.values()) add(step, wait);
  return waits;
}

/** Visibility times by `queue \x1f message id`, and the queues whose times could not be read. */
interface MessageTimes {
  readonly times: ReadonlyMap<string, Date>;
  /** Why, by queue. */
  readonly unavailable: ReadonlyMap<string, string>;
}

/**
 * When each queued task's message becomes visible, read from the queue's table: PGMQ has no
 * function that reads a message without taking it. This is one of the two reads outside PGMQ's
 * functions that the PGMQ rule allows (docs/design.md, The PGMQ rule): `msg_id` and `vt` of
 * `pgmq.q_<queue>`, in the dashboard's read-only transaction. It fails soft: the catalog is asked
 * first (which needs no privilege), and where the role may not read those columns or the table
 * does not have them, the queue is named in `unavailable` and its tasks read as visible; a failed
 * query would abort the whole view's transaction. A queue whose table is gone is skipped.
 */
async function messageTimes(tx: ReadTx, queued: readonly TaskRow[]): Promise<MessageTimes> {
  const times = new Map<string, Date>();
  const unavailable = new Map<string, string>();
  const byQueue = new Map<string, string[]>();
  for (const t of queued) {
    if (t.message_id !== null) {
      byQueue.set(t.queue_name, [...byQueue.get(t.queue_name) ?? [], t.message_id]);
    }
  }
  for (const [queue, ids] of byQueue) {
    // PGMQ's table name for a queue is q_ and the lowercased name (pgmq.format_table_name); task
    // snapshots hold canonical lowercase names. has_column_privilege by column number answers
    // NULL, never an error, for a column that does not exist.
    const [layout] = await tx<{ table: string; columns: number; readable: boolean }[]>`
      select c.relname::text as table,
             count(a.attnum)::int as columns,
             coalesce(pg_catalog.has_schema_privilege(c.relnamespace, 'USAGE')
                      and bool_and(pg_catalog.has_column_privilege(c.oid, a.attnum, 'SELECT')),
                      false) as readable
      from pg_catalog.pg_class c
      join pg_catalog.pg_namespace n on n.oid = c.relnamespace and n.nspname = 'pgmq'
      left join pg_catalog.pg_attribute a
        on a.attrelid = c.oid and a.attname in ('msg_id', 'vt') and a.attnum > 0
           and not a.attisdropped
      where c.relname = ${`q_${queue.toLowerCase()}`} and c.relkind in ('r', 'p')
      group by c.oid, c.relname, c.relnamespace`;
    if (layout === undefined) continue;
    if (layout.columns < 2) {
      unavailable.set(queue, `pgmq.${layout.table} has no msg_id and vt columns`);
      continue;
    }
    if (!layout.readable) {
      unavailable.set(queue, `this role may not read msg_id and vt of pgmq.${layout.table}`);
      continue;
    }
    const table = tx(`pgmq.${layout.table}`);
    const rows = await tx<{ msg_id: string; vt: Date }[]>`
      select msg_id::text, vt from ${table} where msg_id = any(${ids}::bigint[])`;
    for (const r of rows) times.set(`${queue}\u001f${r.msg_id}`, r.vt);
  }
  return { times, unavailable };
}
