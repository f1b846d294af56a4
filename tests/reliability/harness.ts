/**
 * Shared pieces of the reliability tests and the soak: a seeded generator, the load flows (two
 * versions on two shared queues, with seeded handler failures), the execution log every handler
 * writes, foreign messages, fault helpers and the invariant check run after every scenario.
 *
 * Handlers record each execution as (run, step, index, attempt) in `public.rel_exec` (a table, not
 * memory, so worker subprocesses can record too); the attempt is read from the task row in the same
 * statement, so two executions of one attempt show up as two rows.
 *
 * @module
 */
import type postgres from "postgres";
import { Flow, routeFlow } from "../../mod.ts";

type Sql = postgres.Sql;

/** The two shared queues every load scenario uses. */
export const QUEUES = ["rel_a", "rel_b"] as const;

/** The load flows' slugs. */
export const LOAD_FLOWS = ["rel_load_v1", "rel_load_v2"] as const;

/** A flow routed to `rel_a` that no worker serves: its messages must stay untouched. */
export const ORPHAN_FLOW = "rel_orphan";

/** Map items per run: each run has 1 (split) + N (work) + 1 (total) tasks. */
export const ITEMS_PER_RUN = 8;
export const TASKS_PER_RUN = ITEMS_PER_RUN + 2;

/**
 * mulberry32: a small seeded generator, so every generated case and every injected failure can
 * be replayed from the seed printed by the test.
 */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The seed of a run: `RELIABILITY_SEED` when set (to replay a failure), else a fresh one. */
export function seedFromEnv(): number {
  const fixed = Deno.env.get("RELIABILITY_SEED");
  return fixed ? Number(fixed) : Math.floor(Math.random() * 2 ** 31);
}

/** Options of the load flows' handlers (read from the context, so subprocesses can set them). */
export interface LoadContext {
  /** Probability that one attempt throws. */
  readonly failRate: number;
  /** Seed of the failure decision (mixed with run, step, index and attempt). */
  readonly seed: number;
  /** Milliseconds each handler waits after recording (keeps a batch in flight for fault tests). */
  readonly delayMs: number;
}

interface HandlerCtx {
  readonly sql: Sql;
  readonly stepTask: {
    readonly run_id: string;
    readonly step_slug: string;
    readonly task_index: number;
  };
  readonly load?: LoadContext;
}

/**
 * Records this execution and decides, from the seed, whether it fails. One statement: the attempt
 * is the task row's `attempts_count` as this handler runs.
 */
async function execute(ctx: HandlerCtx): Promise<void> {
  const load = ctx.load ?? { failRate: 0, seed: 0, delayMs: 0 };
  const t = ctx.stepTask;
  // A query without parameters, as handlers write them: postgres.js pipelines these, which a
  // transaction pooler cannot route unless the pool holds them back (docs/connections.md).
  await ctx.sql`select 1`;
  // In an explicit transaction: postgres.js resolves a statement at its CommandComplete, which a
  // backend terminated before the implicit commit still sends (with its FATAL), so an autocommit
  // insert could be rolled back after the handler saw it succeed; COMMIT answers only once done.
  const [row] = await ctx.sql.begin((tx) =>
    tx<{ failed: boolean }[]>`
    insert into public.rel_exec (run_id, step_slug, task_index, attempt, failed)
    select t.run_id, t.step_slug, t.task_index, t.attempts_count,
           abs(hashtext(concat_ws(':', ${load.seed}::text, t.run_id, t.step_slug, t.task_index,
                                  t.attempts_count))) % 10000 < ${Math.round(load.failRate * 10000)}
    from pgflow.step_tasks t
    where t.run_id = ${t.run_id}::uuid and t.step_slug = ${t.step_slug}
      and t.task_index = ${t.task_index}
    returning failed`
  );
  if (row === undefined) {
    throw new Error(`task ${t.run_id}/${t.step_slug}/${t.task_index} not found`);
  }
  if (load.delayMs > 0) await new Promise((r) => setTimeout(r, load.delayMs));
  if (row.failed) throw new Error("injected failure");
}

function loadFlow(slug: string) {
  return new Flow<{ n: number }, LoadContextHolder>({
    slug,
    maxAttempts: 3,
    baseDelay: 1,
    timeout: 3,
  })
    .array({ slug: "split" }, async (input, ctx) => {
      await execute(ctx as unknown as HandlerCtx);
      return Array.from({ length: input.n }, (_, i) => i);
    })
    .map({ slug: "work", array: "split" }, async (item, ctx) => {
      await execute(ctx as unknown as HandlerCtx);
      return item * 2;
    })
    .step({ slug: "total", dependsOn: ["work"] }, async (deps, ctx) => {
      await execute(ctx as unknown as HandlerCtx);
      return deps.work.reduce((a, b) => a + b, 0);
    });
}

/** The custom context the load handlers read their failure settings from. */
export type LoadContextHolder = { load: LoadContext };

/** Version 1: split and total on rel_a, the map on rel_b. */
export const loadV1 = routeFlow(loadFlow(LOAD_FLOWS[0]), {
  queues: { split: "rel_a", work: "rel_b", total: "rel_a" },
});

/** Version 2: the mirror image, so both queues carry both versions. */
export const loadV2 = routeFlow(loadFlow(LOAD_FLOWS[1]), {
  queues: { split: "rel_b", work: "rel_a", total: "rel_b" },
});

/** The flow nobody serves (compiled by the test, never given to a worker). */
export const orphan = routeFlow(
  new Flow<{ n: number }>({ slug: ORPHAN_FLOW }).step({ slug: "only" }, () => {
    throw new Error("the orphan flow must never run");
  }),
  { queues: { only: "rel_a" } },
);

/** Creates the execution log (idempotent). */
export async function createExecLog(sql: Sql): Promise<void> {
  await sql.unsafe(`
    create table if not exists public.rel_exec (
      run_id uuid not null, step_slug text not null, task_index integer not null,
      attempt integer not null, failed boolean not null, at timestamptz not null default clock_timestamp()
    )`);
}

/**
 * Starts `runs` runs, alternating the two versions; returns their ids. One statement per batch
 * so a big soak does not spend its time on round trips.
 */
export async function startLoadRuns(sql: Sql, runs: number): Promise<string[]> {
  const ids: string[] = [];
  for (let i = 0; i < runs; i += 100) {
    const count = Math.min(100, runs - i);
    const rows = await sql<{ run_id: string }[]>`
      select (pgflow.start_flow(case when g % 2 = 0 then ${LOAD_FLOWS[0]} else ${LOAD_FLOWS[1]} end,
                                jsonb_build_object('n', ${ITEMS_PER_RUN}::int))).run_id
      from generate_series(${i}::int, ${i + count - 1}::int) g`;
    ids.push(...rows.map((r) => r.run_id));
  }
  return ids;
}

/** A message sent by someone else; it must come out exactly as it went in. */
export interface ForeignMessage {
  queue: string;
  msgId: string;
  body: unknown;
}

/**
 * Sends foreign messages to every shared queue: non-object bodies, a huge body, and bodies that
 * name real runs and steps of the load flows (they look like work, but bodies authorise nothing).
 */
export async function sendForeignMessages(sql: Sql, namingRun?: string): Promise<ForeignMessage[]> {
  const bodies: unknown[] = [
    42,
    "run everything",
    [1, 2, 3],
    true,
    null,
    {},
    { pad: "x".repeat(1_000_000) },
    { flow_slug: LOAD_FLOWS[0], step_slug: "split", run_id: namingRun ?? crypto.randomUUID() },
    { flow_slug: LOAD_FLOWS[1], step_slug: "work", task_index: 0, msg_id: 1, attempt: 1 },
    { flow_slug: ORPHAN_FLOW, step_slug: "only", run_id: namingRun ?? crypto.randomUUID() },
  ];
  const sent: ForeignMessage[] = [];
  for (const queue of QUEUES) {
    for (const body of bodies) {
      const [row] = await sql<{ id: string }[]>`
        select pgmq.send(${queue}, ${JSON.stringify(body)}::text::jsonb)::text as id`;
      sent.push({ queue, msgId: row.id, body });
    }
  }
  return sent;
}

/**
 * Backdates `started_at` of tasks started more than `olderThanMs` ago by an hour, so stalled
 * recovery (timeout + 30 s) acts at once instead of after half a minute. Only for tasks whose
 * handlers are fast: a task this old in these tests was claimed by a worker that died or whose
 * claim reply was lost.
 */
export async function backdateStuck(sql: Sql, olderThanMs: number): Promise<number> {
  const rows = await sql`
    update pgflow.step_tasks set started_at = started_at - interval '1 hour'
    where status = 'started' and started_at > now() - interval '30 minutes'
      and started_at < clock_timestamp() - make_interval(secs => ${olderThanMs / 1000}::float8)
    returning 1`;
  return rows.length;
}

/**
 * Repeats `tick` every `ms` until the returned stop function is called; errors are kept, not
 * thrown (a fault loop runs while the database may be down).
 */
export function repeat(ms: number, tick: () => Promise<unknown>): () => Promise<void> {
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await tick().catch(() => {});
      await new Promise((r) => setTimeout(r, ms));
    }
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}

/** Waits until no run of the load flows is started. */
export async function waitForLoadRuns(
  sql: Sql,
  timeoutMs: number,
  what = "load runs",
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const [row] = await sql<{ open: number; total: number }[]>`
      select count(*) filter (where status = 'started')::int as open, count(*)::int as total
      from pgflow.runs where flow_slug = any (${LOAD_FLOWS as unknown as string[]})`;
    if (row.open === 0) return;
    if (Date.now() > deadline) {
      throw new Error(
        `timed out after ${timeoutMs} ms: ${row.open} of ${row.total} ${what} still started`,
      );
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

/** What a scenario did, for the soak report and the docs. */
export interface Figures {
  runs: number;
  completedRuns: number;
  failedRuns: number;
  tasks: number;
  executions: number;
  injectedFailures: number;
  stalledRecoveries: number;
  lost: number;
  duplicated: number;
}

/**
 * Checks every invariant after a scenario and returns its figures; throws listing every broken
 * invariant. `foreign` are messages that must be untouched apart from PGMQ's read counter and vt.
 */
export async function checkInvariants(sql: Sql, foreign: ForeignMessage[] = []): Promise<Figures> {
  const flows = LOAD_FLOWS as unknown as string[];
  const problems: string[] = [];
  const list = (label: string, rows: readonly unknown[]) => {
    if (rows.length > 0) {
      problems.push(`${label} (${rows.length}): ${JSON.stringify(rows.slice(0, 5))}`);
    }
  };

  // Every run terminal, and nothing of a terminal run left queued or started.
  const open =
    await sql`select run_id from pgflow.runs where flow_slug = any (${flows}) and status = 'started'`;
  list("runs still started", open);
  const stranded = await sql`
    select t.run_id, t.step_slug, t.task_index, t.status from pgflow.step_tasks t
    join pgflow.runs r on r.run_id = t.run_id
    where r.flow_slug = any (${flows}) and r.status <> 'started' and t.status in ('queued', 'started')`;
  list("tasks of terminal runs still queued or started", stranded);
  const incomplete = await sql`
    select r.run_id from pgflow.runs r
    where r.flow_slug = any (${flows}) and r.status = 'completed'
      and (r.output is null or exists (select 1 from pgflow.step_tasks t
                                       where t.run_id = r.run_id and t.status <> 'completed'))`;
  list("completed runs with a task that did not complete", incomplete);

  // No attempt executed twice; attempts within bounds; every completion backed by an execution.
  const duplicated = await sql`
    select run_id, step_slug, task_index, attempt, count(*)::int as n from public.rel_exec
    group by 1, 2, 3, 4 having count(*) > 1`;
  list("attempts executed more than once", duplicated);
  const overAttempts = await sql`
    select t.run_id, t.step_slug, t.task_index, t.attempts_count from pgflow.step_tasks t
    join pgflow.steps s on s.flow_slug = t.flow_slug and s.step_slug = t.step_slug
    join pgflow.flows f on f.flow_slug = t.flow_slug
    where t.flow_slug = any (${flows})
      and t.attempts_count - t.uncounted_attempts > coalesce(s.opt_max_attempts, f.opt_max_attempts)`;
  list("tasks with more attempts than allowed", overAttempts);
  const phantom = await sql`
    select e.* from public.rel_exec e
    left join pgflow.step_tasks t using (run_id, step_slug, task_index)
    where t.run_id is null or e.attempt < 1 or e.attempt > t.attempts_count`;
  list("executions that match no claimed attempt", phantom);
  const unbacked = await sql`
    select t.run_id, t.step_slug, t.task_index, t.attempts_count from pgflow.step_tasks t
    where t.flow_slug = any (${flows}) and t.status = 'completed' and not exists (
      select 1 from public.rel_exec e
      where e.run_id = t.run_id and e.step_slug = t.step_slug and e.task_index = t.task_index
        and not e.failed)`;
  list("completed tasks no successful execution explains", unbacked);
  for (const t of unbacked.slice(0, 3)) {
    // What a failure here needs to be explained: the task row, its attempts, its executions.
    const detail = await sql`
      select (select to_jsonb(x) - 'input' - 'output' from pgflow.step_tasks x
              where x.run_id = ${t.run_id} and x.step_slug = ${t.step_slug}
                and x.task_index = ${t.task_index}) as task,
             (select jsonb_agg(to_jsonb(a) - 'error_stack' order by a.attempt) from pgflow.task_attempts a
              where a.run_id = ${t.run_id} and a.step_slug = ${t.step_slug}
                and a.task_index = ${t.task_index}) as attempts,
             (select jsonb_agg(to_jsonb(e) order by e.at) from public.rel_exec e
              where e.run_id = ${t.run_id} and e.step_slug = ${t.step_slug}
                and e.task_index = ${t.task_index}) as executions`;
    problems.push(`  detail: ${JSON.stringify(detail[0])}`);
  }

  // No message left in a queue for a terminal task; each such message is in the archive.
  for (const queue of QUEUES) {
    const leftover = await sql.unsafe(`
      select t.run_id, t.step_slug, t.task_index, t.status, t.message_id from pgflow.step_tasks t
      join pgflow.runs r on r.run_id = t.run_id
      join pgmq."q_${queue}" q on q.msg_id = t.message_id
      where t.queue_name = '${queue}' and (t.status not in ('queued', 'started') or r.status <> 'started')`);
    list(`messages left in ${queue} for terminal tasks`, leftover);
    const unarchived = await sql.unsafe(`
      select t.run_id, t.step_slug, t.task_index, t.message_id from pgflow.step_tasks t
      where t.queue_name = '${queue}' and t.status not in ('queued', 'started')
        and not exists (select 1 from pgmq."a_${queue}" a where a.msg_id = t.message_id)`);
    list(`terminal tasks of ${queue} whose message is not archived`, unarchived);
  }

  // The orphan flow's tasks: never claimed, never changed, messages still live.
  const orphanTouched = await sql`
    select run_id, status, attempts_count from pgflow.step_tasks
    where flow_slug = ${ORPHAN_FLOW} and (status <> 'queued' or attempts_count <> 0)`;
  list("tasks of the unserved flow were touched", orphanTouched);
  const orphanGone = await sql.unsafe(`
    select t.message_id from pgflow.step_tasks t
    where t.flow_slug = '${ORPHAN_FLOW}'
      and not exists (select 1 from pgmq."q_${orphan.queues.only}" q where q.msg_id = t.message_id)`);
  list("messages of the unserved flow left their queue", orphanGone);

  // Foreign messages: still live, body unchanged, never archived.
  for (const m of foreign) {
    // Compared as jsonb: jsonb orders object keys its own way.
    const [live] = await sql.unsafe(
      `select message = $2::text::jsonb as same from pgmq."q_${m.queue}" where msg_id = $1`,
      [m.msgId, JSON.stringify(m.body)],
    );
    if (live === undefined) problems.push(`foreign message ${m.queue}/${m.msgId} left its queue`);
    else if (!live.same) {
      problems.push(`foreign message ${m.queue}/${m.msgId} body changed`);
    }
  }

  if (problems.length > 0) throw new Error(`invariants broken:\n- ${problems.join("\n- ")}`);

  const [f] = await sql<Omit<Figures, "lost" | "duplicated">[]>`
    select
      (select count(*)::int from pgflow.runs where flow_slug = any (${flows})) as runs,
      (select count(*)::int from pgflow.runs where flow_slug = any (${flows}) and status = 'completed') as "completedRuns",
      (select count(*)::int from pgflow.runs where flow_slug = any (${flows}) and status = 'failed') as "failedRuns",
      (select count(*)::int from pgflow.step_tasks where flow_slug = any (${flows})) as tasks,
      (select count(*)::int from public.rel_exec) as executions,
      (select count(*)::int from public.rel_exec where failed) as "injectedFailures",
      -- An attempt that neither completed nor failed by its handler was taken back by recovery
      -- (or interrupted by its worker's stop).
      (select coalesce(sum(t.attempts_count - (t.status = 'completed')::int - (
         select count(*) from public.rel_exec e where e.run_id = t.run_id and e.step_slug = t.step_slug
           and e.task_index = t.task_index and e.failed)), 0)::int
       from pgflow.step_tasks t
       where t.flow_slug = any (${flows}) and t.status in ('completed', 'failed')) as "stalledRecoveries"`;
  return { ...f, lost: 0, duplicated: 0 };
}

/** Terminates every backend whose running query matches `pattern`; returns how many. */
export async function terminateBackends(sql: Sql, pattern: string): Promise<number> {
  const rows = await sql`
    select pg_terminate_backend(pid) as ok from pg_stat_activity
    where datname = current_database() and pid <> pg_backend_pid() and query ~ ${pattern}
      and state = 'active'`;
  return rows.filter((r) => r.ok).length;
}
