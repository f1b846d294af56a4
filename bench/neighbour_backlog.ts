/**
 * `deno run -A bench/neighbour_backlog.ts [--backlog N] [--runs N] [--pace N] [--task-ms N] [--vt S]
 * [--repeat N]`
 *
 * An idle worker behind another flow's backlog on a shared queue. Worker N serves only flow g and
 * has a backlog of g's tasks (default 1,500 of 15 ms) at the head of the queue; worker S serves
 * only flow f and is idle; `--runs` runs of f are started right after the backlog. Prints, per
 * repetition, f's pickup (queued to started) p50 and p95 in seconds and in visibility timeouts, how
 * much of g's backlog was still not started when f's last run completed, and g's drain time beside
 * S against g's drain alone (no S, no f: what S's reads cost N). DATABASE_URL, or a throw-away
 * local Postgres started here. Figures only; nothing here asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createLogger, Flow, type FlowWorker, routeFlow } from "../mod.ts";
import { anyWorker } from "./engine.ts";
import { sleep } from "./clock.ts";
import { dbNow, startBacklog, startPaced, waitRunsCompleted } from "./load.ts";
import { positiveOption } from "./options.ts";
import { fixed, percentile, textTable } from "./stats.ts";

const QUEUE = "bench_neighbours";

/** One repetition's figures. */
interface Repetition {
  /** f's pickups, seconds. */
  readonly p50: number;
  readonly p95: number;
  /** g's tasks not yet started when f's last run completed, of the backlog. */
  readonly gLeft: number;
  /** g's drain, first claim to last completion, seconds: beside S, and alone. */
  readonly gBeside: number;
  readonly gAlone: number;
  /** g's messages S read and handed back. */
  readonly handedBack: number;
}

/** `--name value` from the command line, else `fallback`. */
const option = (name: string, fallback: number): number =>
  positiveOption(Deno.args, name, fallback);

const BACKLOG = option("backlog", 1500);
const RUNS = option("runs", 25);
/** f's runs per second (0: all at once, right after the backlog). */
const PACE = Deno.args.includes("--pace") ? option("pace", 10) : 0;
const TASK_MS = option("task-ms", 15);
const VT = option("vt", 6);
const REPEAT = option("repeat", 4);

const g = routeFlow(
  new Flow<{ n?: number }>({ slug: "bench_nb_g" }).step({ slug: "work" }, async () => {
    await sleep(TASK_MS);
    return 1;
  }),
  { queues: { work: QUEUE } },
);
const f = routeFlow(
  new Flow<{ n?: number }>({ slug: "bench_nb_f" }).step({ slug: "work" }, () => 1),
  { queues: { work: QUEUE } },
);

async function startWorker(
  url: string,
  target: typeof f | typeof g,
  dispositions?: Map<string, number>,
): Promise<FlowWorker> {
  const logger = createLogger({
    level: dispositions === undefined ? "warn" : "debug",
    sink: (r) => {
      const d = /^message not claimed \((\w+)\)$/.exec(r.event)?.[1];
      if (d !== undefined) dispositions?.set(d, (dispositions.get(d) ?? 0) + 1);
    },
  });
  const worker = anyWorker(target, {
    connectionString: url,
    queueName: QUEUE,
    visibilityTimeout: VT,
    functionName: target === f ? "fn_f" : "fn_g",
    logger,
  });
  await worker.start();
  return worker;
}

/** g's drain since `since`: first claim to last completion, seconds. */
async function drainSeconds(sql: postgres.Sql, since: string): Promise<number> {
  const [row] = await sql<{ s: number }[]>`
    select extract(epoch from max(completed_at) - min(started_at))::float8 as s
    from pgflow.step_tasks where flow_slug = 'bench_nb_g' and queued_at >= ${since}::timestamptz`;
  return row.s;
}

async function repetition(url: string, sql: postgres.Sql): Promise<Repetition> {
  // g alone: N drains the backlog with nobody else reading the queue.
  const alone = await startWorker(url, g);
  let since = await dbNow(sql);
  try {
    await startBacklog(sql, ["bench_nb_g"], BACKLOG);
    await waitRunsCompleted(sql, ["bench_nb_g"], since, BACKLOG);
  } finally {
    await alone.stop();
  }
  const gAlone = await drainSeconds(sql, since);

  // The same backlog with S beside N, and f's runs behind it.
  const dispositions = new Map<string, number>();
  const workers = [await startWorker(url, g), await startWorker(url, f, dispositions)];
  since = await dbNow(sql);
  try {
    await startBacklog(sql, ["bench_nb_g"], BACKLOG);
    if (PACE > 0) await startPaced(sql, ["bench_nb_f"], RUNS, PACE);
    else await startBacklog(sql, ["bench_nb_f"], RUNS);
    await waitRunsCompleted(sql, ["bench_nb_f"], since, RUNS);
    await waitRunsCompleted(sql, ["bench_nb_g"], since, BACKLOG);
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
  const pickups = await sql<{ s: number }[]>`
    select extract(epoch from started_at - queued_at)::float8 as s from pgflow.step_tasks
    where flow_slug = 'bench_nb_f' and queued_at >= ${since}::timestamptz`;
  const [{ left }] = await sql<{ left: number }[]>`
    with f_done as (
      select max(completed_at) as at from pgflow.runs
      where flow_slug = 'bench_nb_f' and started_at >= ${since}::timestamptz
    )
    select count(*)::int as left from pgflow.step_tasks t, f_done
    where t.flow_slug = 'bench_nb_g' and t.queued_at >= ${since}::timestamptz
      and t.started_at > f_done.at`;
  const s = pickups.map((r) => r.s);
  return {
    p50: percentile(s, 50),
    p95: percentile(s, 95),
    gLeft: left / BACKLOG,
    gBeside: await drainSeconds(sql, since),
    gAlone,
    handedBack: dispositions.get("handed_back") ?? 0,
  };
}

const db = await openPgflowDatabase();
const sql = postgres(db.url, { max: 2, onnotice: () => {} });
try {
  console.error(
    `backlog ${BACKLOG} × ${TASK_MS} ms of g, ${RUNS} runs of f, visibility timeout ${VT} s`,
  );
  const rows: string[][] = [[
    "rep",
    "f pickup p50 s",
    "p95 s",
    "p95 × vt",
    "g not started at f's end",
    "g drain beside S s",
    "alone s",
    "× alone",
    "handed_back by S",
  ]];
  for (let rep = 1; rep <= REPEAT; rep++) {
    const r = await repetition(db.url, sql);
    rows.push([
      String(rep),
      fixed(r.p50, 2),
      fixed(r.p95, 2),
      fixed(r.p95 / VT, 2),
      `${fixed(r.gLeft * 100, 0)} %`,
      fixed(r.gBeside, 2),
      fixed(r.gAlone, 2),
      fixed(r.gBeside / r.gAlone, 2),
      String(r.handedBack),
    ]);
    console.error(`repetition ${rep} done`);
  }
  console.log(textTable(rows));
} finally {
  await sql.end();
  await db.close();
}
