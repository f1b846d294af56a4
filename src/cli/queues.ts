/**
 * `pgflow queues list|drop`: every PGMQ queue with what pgflow knows of it (shared, a flow's own,
 * a private step queue, or not pgflow's), the routes and unfinished tasks that use it and its
 * messages; and dropping a queue nothing uses any more (a stray one from a typo in a route map),
 * which refuses while a route or an unfinished task still names it.
 *
 * @module
 */
import { queueDepths } from "../operations/queue_depths.ts";
import type { Sql } from "../platform/types.ts";
import type { ParsedArgs } from "./args.ts";
import { lookalikes } from "./deploy/lookalikes.ts";
import { CliError, command, progress, result } from "./output.ts";
import { runSubcommand } from "./subcommands.ts";

/** The help text of `pgflow queues`. */
export const QUEUES_HELP = `pgflow queues <list | drop> [flags]

  list              every PGMQ queue: its kind, messages, live workers, the routes and the
                    unfinished tasks that use it [--json]
  drop QUEUE        drop a queue nothing uses: with its messages and its archive [--yes] [--json]

Kinds: shared (declared through routeFlow), flow (a plain flow's own queue), private (a step's own
queue, withStepQueues), external (not created by pgflow). list marks a queue whose name is one
letter from another's ("like thread_processing"): often a typo in a route map.

drop refuses, naming them, while a persisted route (a step of a compiled flow) or an unfinished
task of a started run uses the queue: a version whose route map had the typo keeps routing there
until it is deleted (select pgflow.delete_flow_and_data('<flow>') once it has no started runs).
Without --yes it prints what it would drop and does nothing.

  --yes               drop it (without it, only print what would be dropped)
  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json              one JSON object on stdout

Exit codes: 0 listed or dropped, 1 refused (in use) or failed, 2 usage error, 3 no such queue,
4 drop without --yes (nothing done).`;

/** One queue as `queues list` shows it. */
export interface QueueUse {
  readonly queue: string;
  /** `shared`, `flow`, `private` or `external`. */
  readonly kind: "shared" | "flow" | "private" | "external";
  /** Messages in it (visible or not), when PGMQ reports it. */
  readonly messages: number | null;
  /** Live workers polling it. */
  readonly liveWorkers: number;
  /** The steps routed to it (`flow/step`). */
  readonly routes: readonly string[];
  /** Tasks of started runs queued or started on it. */
  readonly unfinishedTasks: number;
  /** Another queue one letter away, if any. */
  readonly like: string | null;
}

/** How long a worker's heartbeat counts as live, as in `pgflow coverage`. */
const STALE_AFTER_SECONDS = 30;

/**
 * Runs `pgflow queues …`; returns the exit code.
 *
 * @example
 * ```ts
 * import { queues } from "./queues.ts";
 *
 * // Deno.exit(await queues(["drop", "thread_procesing", "--yes"]));
 * ```
 */
export function queues(argv: readonly string[]): Promise<number> {
  return runSubcommand("queues", QUEUES_HELP, {
    list: { arguments: 0, run: list },
    drop: {
      flags: { "yes": "boolean" },
      arguments: 1,
      usage: `pgflow queues drop needs the queue's name; \`${command("queues list")}\` lists them`,
      run: drop,
    },
  }, argv);
}

/**
 * Every PGMQ queue and what uses it, by name.
 *
 * @example
 * ```ts
 * import { queueUses } from "./queues.ts";
 *
 * // for (const q of await queueUses(sql)) console.log(q.queue, q.kind, q.routes);
 * ```
 */
export async function queueUses(sql: Sql): Promise<QueueUse[]> {
  const depths = (await queueDepths(sql, STALE_AFTER_SECONDS)).filter((d) => d.messages !== null);
  const rows = await sql<
    { queue: string; shared: boolean; own: string | null; routes: string[]; tasks: number }[]
  >`
    select q.queue_name::text as queue,
           exists (select 1 from pgflow.shared_queues s where s.queue_name = q.queue_name) as shared,
           (select c.flow_slug from pgflow.created_queues c where c.queue_name = q.queue_name) as own,
           array(select st.flow_slug || '/' || st.step_slug from pgflow.steps st
                 where st.queue_name = q.queue_name order by st.flow_slug, st.step_index) as routes,
           (select count(*)::int from pgflow.step_tasks t
            join pgflow.runs r on r.run_id = t.run_id
            where t.queue_name = q.queue_name and t.status in ('queued', 'started')
              and r.status = 'started') as tasks
    from pgmq.list_queues() q`;
  const byName = new Map(rows.map((r) => [r.queue, r]));
  const names = depths.map((d) => d.name);
  const similar = new Map(lookalikes(names, names).map((l) => [l.queue, l.like]));
  return depths.map((d) => {
    const row = byName.get(d.name);
    return {
      queue: d.name,
      kind: row?.shared
        ? "shared"
        : row?.own === null || row?.own === undefined
        ? "external"
        : d.name.includes("__")
        ? "private"
        : "flow",
      messages: d.messages,
      liveWorkers: d.liveWorkers,
      routes: row?.routes ?? [],
      unfinishedTasks: row?.tasks ?? 0,
      like: similar.get(d.name) ?? null,
    };
  });
}

async function list(sql: Sql, args: ParsedArgs): Promise<number> {
  const found = await queueUses(sql);
  if (args.booleans.has("json")) {
    result(JSON.stringify({ queues: found }));
    return found.length === 0 ? 3 : 0;
  }
  if (found.length === 0) {
    result("no queues");
    return 3;
  }
  const table = [
    ["queue", "kind", "messages", "workers", "tasks", "routes", "note"],
    ...found.map((q) => [
      q.queue,
      q.kind,
      q.messages === null ? "?" : String(q.messages),
      String(q.liveWorkers),
      String(q.unfinishedTasks),
      q.routes.length === 0 ? "-" : q.routes.join(", "),
      q.like === null ? "" : `like ${q.like}`,
    ]),
  ];
  const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
  for (const row of table) {
    result(row.map((cell, i) => cell.padEnd(widths[i])).join("  ").trimEnd());
  }
  return 0;
}

/** What stopped a drop, or what it would drop. */
interface DropCheck {
  readonly exists: boolean;
  readonly routes: readonly string[];
  readonly tasks: readonly { run: string; step: string; n: number }[];
  readonly messages: number;
}

/** Shown at most, of the routes and runs that block a drop. */
const NAMED = 10;

async function drop(sql: Sql, args: ParsedArgs): Promise<number> {
  const queue = args.positionals[0].toLowerCase();
  const json = args.booleans.has("json");
  const yes = args.booleans.has("yes");
  let check: DropCheck | undefined;
  await sql.begin(async (tx) => {
    // The lock provisioning takes: no compile creates or routes to this queue meanwhile.
    await tx`select pg_advisory_xact_lock(hashtext('pgflow.queue:' || ${queue}::text))`;
    check = await inspect(tx as unknown as Sql, queue);
    if (!check.exists || check.routes.length > 0 || check.tasks.length > 0 || !yes) return;
    await tx`select pgmq.drop_queue(${queue})`;
    await tx`delete from pgflow.shared_queues where queue_name = ${queue}`;
    await tx`delete from pgflow.created_queues where queue_name = ${queue}`;
  });
  const c = check!;
  if (!c.exists) {
    if (json) result(JSON.stringify({ queue, dropped: false, error: "no such queue" }));
    console.error(`pgflow: there is no queue ${queue}; \`${command("queues list")}\` lists them`);
    return 3;
  }
  if (c.routes.length > 0 || c.tasks.length > 0) {
    const why = [
      c.routes.length > 0 ? `routes of ${named(c.routes)}` : "",
      c.tasks.length > 0
        ? `unfinished tasks of ${named(c.tasks.map((t) => `run ${t.run} (${t.step}: ${t.n})`))}`
        : "",
    ].filter(Boolean).join(" and ");
    if (json) result(JSON.stringify({ queue, dropped: false, routes: c.routes, tasks: c.tasks }));
    throw new CliError(
      `queue ${queue} is still used by ${why}; nothing was dropped. A flow's routes go with the ` +
        "flow: once it has no started runs, select pgflow.delete_flow_and_data('<flow>'); " +
        "unfinished tasks end with their runs (or cancel them: pgflow runs cancel)",
    );
  }
  const what = `its ${c.messages} message(s) and its archive`;
  if (!yes) {
    if (json) {
      result(JSON.stringify({ queue, dropped: false, planned: true, messages: c.messages }));
    } else {
      result(`would drop queue ${queue}, with ${what}`);
      result("nothing was done; run the same command with --yes to drop it");
    }
    return 4;
  }
  if (json) result(JSON.stringify({ queue, dropped: true, messages: c.messages }));
  else result(`dropped queue ${queue}, with ${what}`);
  progress(`dropped ${queue}`);
  return 0;
}

async function inspect(sql: Sql, queue: string): Promise<DropCheck> {
  const [{ exists }] = await sql<{ exists: boolean }[]>`
    select exists (select 1 from pgmq.list_queues() q where q.queue_name = ${queue}) as exists`;
  if (!exists) return { exists, routes: [], tasks: [], messages: 0 };
  const routes = (await sql<{ route: string }[]>`
    select st.flow_slug || '/' || st.step_slug as route from pgflow.steps st
    where st.queue_name = ${queue} order by st.flow_slug, st.step_index`).map((r) => r.route);
  const tasks = await sql<{ run: string; step: string; n: number }[]>`
    select t.run_id::text as run, t.step_slug as step, count(*)::int as n
    from pgflow.step_tasks t join pgflow.runs r on r.run_id = t.run_id
    where t.queue_name = ${queue} and t.status in ('queued', 'started') and r.status = 'started'
    group by t.run_id, t.step_slug order by t.run_id, t.step_slug`;
  const [metrics] = await sql<{ n: string }[]>`
    select queue_length::text as n from pgmq.metrics(${queue})`;
  return { exists, routes, tasks: [...tasks], messages: Number(metrics?.n ?? 0) };
}

function named(items: readonly string[]): string {
  const shown = items.slice(0, NAMED).join(", ");
  return items.length > NAMED ? `${shown} and ${items.length - NAMED} more` : shown;
}
