/**
 * `deno run -A bench/fairness.ts [--backlog N] [--runs N] [--pace N] [--task-ms N] [--repeat N]
 *  [--build bulk|calls|both] [--windows 32,16,8]`
 *
 * Fairness between flows on one shared queue (issue 43 item 2, docs/flow-control.md). Two workers
 * serve flows A and B on one queue. Per repetition, three phases on the same server:
 *
 * - B alone: `--runs` runs of B at `--pace` runs/s on an empty queue; B's pickup (queued to
 *   started) p50 and p95.
 * - A alone: a backlog of `--backlog` runs of A; A's throughput (tasks per second, first start to
 *   last completion).
 * - Both: A's backlog, then B paced as above: B's pickup p50/p95 and A's throughput.
 *
 * A alone and both swap order every other repetition (the later one runs on larger tables).
 *
 * A's backlog is built two ways (`--build`, both by default, each in every repetition): `bulk`,
 * one transaction before B starts; `calls`, one start_flow per run on two connections of their
 * own, as requests would, running while B is paced and the workers drain.
 *
 * `--windows` measures several fairness windows (how many of A's messages a newcomer may wait
 * behind, `pgflow._fair_window()`) in the same run, interleaved: each repetition runs every window
 * in turn, the function redefined to return it between them (workers and connections are made
 * anew for each, so no session keeps a plan with the old value) and restored at the end. Default:
 * the schema's own window only.
 *
 * Prints B's p95 beside the backlog against alone (target ≤ 3×), how many of A's tasks started
 * while each of B's waited (what B waits behind, counted, which load does not inflate), and A's
 * throughput beside B against alone (target ≥ 0.9×), then per window the medians over the repetitions with their
 * ranges. DATABASE_URL, or a throw-away local Postgres started here. Figures only; nothing here
 * asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createLogger, createWorker, Flow, type FlowWorker, routeFlow } from "../mod.ts";
import { sleep } from "./clock.ts";
import { dbNow, startBacklog, startPaced, waitRunsCompleted } from "./load.ts";
import { positiveList, positiveOption } from "./options.ts";
import { spread, spreadCell } from "./repeat.ts";
import { fixed, percentile, textTable } from "./stats.ts";

const QUEUE = "bench_fairness";

/** `--name value` from the command line, else `fallback`. */
const option = (name: string, fallback: number): number =>
  positiveOption(Deno.args, name, fallback);

const BACKLOG = option("backlog", 20000);
const RUNS = option("runs", 50);
const PACE = option("pace", 10);
const TASK_MS = option("task-ms", 1);
const REPEAT = option("repeat", 2);
type Build = "bulk" | "calls";
const BUILDS: Build[] = (() => {
  const at = Deno.args.indexOf("--build");
  const value = at < 0 ? "both" : Deno.args[at + 1];
  if (value === "both") return ["bulk", "calls"];
  if (value === "bulk" || value === "calls") return [value];
  throw new Error(`--build takes bulk, calls or both, got ${value}`);
})();

const a = routeFlow(
  new Flow<{ n?: number }>({ slug: "bench_fair_a" }).step({ slug: "work" }, async () => {
    await sleep(TASK_MS);
    return 1;
  }),
  { queues: { work: QUEUE } },
);
const b = routeFlow(
  new Flow<{ n?: number }>({ slug: "bench_fair_b" }).step({ slug: "work" }, async () => {
    await sleep(TASK_MS);
    return 1;
  }),
  { queues: { work: QUEUE } },
);

async function startWorkers(url: string): Promise<FlowWorker[]> {
  const workers = [0, 1].map(() =>
    createWorker([a, b], {
      connectionString: url,
      queueName: QUEUE,
      functionName: "bench_fair",
      logger: createLogger({ level: "warn" }),
    })
  );
  for (const w of workers) await w.start();
  return workers;
}

/** B's pickups since `since`, seconds. */
async function pickups(sql: postgres.Sql, since: string): Promise<number[]> {
  const rows = await sql<{ s: number }[]>`
    select extract(epoch from started_at - queued_at)::float8 as s from pgflow.step_tasks
    where flow_slug = 'bench_fair_b' and queued_at >= ${since}::timestamptz`;
  return rows.map((r) => r.s);
}

/**
 * For each of B's tasks since `since` while A drained: how many of A's tasks started between B's
 * task's creation and its start. What B waited behind, counted: unlike its wait in milliseconds,
 * it does not grow with the machine's load.
 */
async function aheadOfB(sql: postgres.Sql, since: string): Promise<number[]> {
  const rows = await sql<{ n: number }[]>`
    select (select count(*) from pgflow.step_tasks a
            where a.flow_slug = 'bench_fair_a' and a.queued_at >= ${since}::timestamptz
              and a.started_at > b.queued_at and a.started_at < b.started_at)::int as n
    from pgflow.step_tasks b
    where b.flow_slug = 'bench_fair_b' and b.queued_at >= ${since}::timestamptz`;
  return rows.map((r) => r.n);
}

/** A's tasks per second since `since`: first start to last completion. */
async function throughput(sql: postgres.Sql, since: string): Promise<number> {
  const [row] = await sql<{ n: number; s: number }[]>`
    select count(*)::int as n, extract(epoch from max(completed_at) - min(started_at))::float8 as s
    from pgflow.step_tasks where flow_slug = 'bench_fair_a' and queued_at >= ${since}::timestamptz`;
  return row.n / row.s;
}

/** Starts `n` runs of `slug`, one start_flow per call, over `lanes` connections of their own. */
async function startOneByOne(url: string, slug: string, n: number, lanes: number): Promise<void> {
  const starter = postgres(url, { max: lanes, onnotice: () => {} });
  try {
    let next = 0;
    await Promise.all(Array.from({ length: lanes }, async () => {
      while (next < n) {
        next++;
        await starter`select 1 from pgflow.start_flow(${slug}, '{}'::jsonb)`;
      }
    }));
  } finally {
    await starter.end();
  }
}

/** A's backlog built the way `build` says; resolves when every run is started. */
function buildBacklog(url: string, sql: postgres.Sql, build: Build): Promise<void> {
  return build === "bulk"
    ? startBacklog(sql, ["bench_fair_a"], BACKLOG)
    : startOneByOne(url, "bench_fair_a", BACKLOG, 2);
}

interface Repetition {
  bAloneP50: number;
  bAloneP95: number;
  aAlone: number;
  bBesideP50: number;
  bBesideP95: number;
  /** A's tasks started while one of B's waited: median and p95 over B's tasks. */
  aheadP50: number;
  aheadP95: number;
  aBeside: number;
}

/**
 * Makes pgflow._fair_window() return `window` (its definition otherwise unchanged: a constant the
 * planner folds into each plan, which is why sessions made before this may keep the old one).
 */
async function setWindow(sql: postgres.Sql, window: number): Promise<void> {
  await sql.unsafe(`
    create or replace function pgflow._fair_window() returns integer
    language sql immutable set search_path = '' as $$ select ${window} $$`);
}

/**
 * Waits for `n` runs of `slug` since `since`, for as long as a loaded machine may need; if they do
 * not complete, says where the flow's tasks are (a stall, not slowness, leaves tasks waiting).
 */
async function drained(sql: postgres.Sql, slug: string, since: string, n: number): Promise<void> {
  try {
    await waitRunsCompleted(sql, [slug], since, n, 900_000);
  } catch (e) {
    const rows = await sql<{ status: string; n: number }[]>`
      select status, count(*)::int as n from pgflow.step_tasks
      where flow_slug = ${slug} and queued_at >= ${since}::timestamptz group by status`;
    const windows = await sql`select * from pgflow.fair_windows`;
    console.error(`${slug}'s tasks: ${JSON.stringify(rows)}; windows: ${JSON.stringify(windows)}`);
    throw e;
  }
}

async function repetition(url: string, build: Build, besideFirst: boolean): Promise<Repetition> {
  // Connections of this repetition's own: none has planned a statement with another window.
  const sql = postgres(url, { max: 2, onnotice: () => {} });
  const workers = await startWorkers(url);
  try {
    let since = await dbNow(sql);
    await startPaced(sql, ["bench_fair_b"], RUNS, PACE);
    await drained(sql, "bench_fair_b", since, RUNS);
    const bAlone = await pickups(sql, since);

    // A alone and A beside B alternate in order between repetitions: the second runs on tables
    // 20,000 runs larger, which must not always count against the same one.
    const aloneA = async (): Promise<number> => {
      const at = await dbNow(sql);
      await buildBacklog(url, sql, build);
      await drained(sql, "bench_fair_a", at, BACKLOG);
      return throughput(sql, at);
    };
    const aAlone = besideFirst ? 0 : await aloneA();

    since = await dbNow(sql);
    // A bulk backlog is committed before B starts (else B's first runs go out ahead of it); calls
    // go on while B is paced, as requests would.
    const started = buildBacklog(url, sql, build);
    if (build === "bulk") await started;
    await startPaced(sql, ["bench_fair_b"], RUNS, PACE);
    await started;
    await drained(sql, "bench_fair_b", since, RUNS);
    await drained(sql, "bench_fair_a", since, BACKLOG);
    const bBeside = await pickups(sql, since);
    const ahead = await aheadOfB(sql, since);
    const aBeside = await throughput(sql, since);
    return {
      bAloneP50: percentile(bAlone, 50),
      bAloneP95: percentile(bAlone, 95),
      aAlone: besideFirst ? await aloneA() : aAlone,
      bBesideP50: percentile(bBeside, 50),
      bBesideP95: percentile(bBeside, 95),
      aheadP50: percentile(ahead, 50),
      aheadP95: percentile(ahead, 95),
      aBeside,
    };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
    await sql.end();
  }
}

const db = await openPgflowDatabase();
const sql = postgres(db.url, { max: 1, onnotice: () => {} });
const [{ schemaWindow, definition }] = await sql<{ schemaWindow: number; definition: string }[]>`
  select pgflow._fair_window() as "schemaWindow",
         pg_get_functiondef('pgflow._fair_window()'::regprocedure) as definition`;
const WINDOWS = positiveList(Deno.args, "windows", [schemaWindow]);
try {
  console.error(
    `A: backlog ${BACKLOG} × ${TASK_MS} ms; B: ${RUNS} runs at ${PACE}/s; one queue, 2 workers; ` +
      `windows ${WINDOWS.join(", ")}`,
  );
  const rows: string[][] = [[
    "rep",
    "window",
    "A's backlog",
    "B p50 alone ms",
    "B p95 alone ms",
    "B p50 beside A ms",
    "B p95 beside A ms",
    "p95 × alone",
    "A's started while B waited p50/p95",
    "A alone tasks/s",
    "A beside B tasks/s",
    "× alone",
  ]];
  const results: { window: number; build: Build; r: Repetition }[] = [];
  for (let rep = 1; rep <= REPEAT; rep++) {
    for (const window of WINDOWS) {
      await setWindow(sql, window);
      for (const build of BUILDS) {
        const r = await repetition(db.url, build, rep % 2 === 0);
        results.push({ window, build, r });
        const row = [
          String(rep),
          String(window),
          build === "bulk" ? "one transaction" : "one start_flow per run",
          fixed(r.bAloneP50 * 1000, 1),
          fixed(r.bAloneP95 * 1000, 1),
          fixed(r.bBesideP50 * 1000, 1),
          fixed(r.bBesideP95 * 1000, 1),
          fixed(r.bBesideP95 / r.bAloneP95, 2),
          `${fixed(r.aheadP50, 0)} / ${fixed(r.aheadP95, 0)}`,
          fixed(r.aAlone, 0),
          fixed(r.aBeside, 0),
          fixed(r.aBeside / r.aAlone, 2),
        ];
        rows.push(row);
        // Each row as it comes, so that a run cut short keeps what it measured.
        console.error(row.join(" | "));
      }
    }
  }
  console.log(textTable(rows));
  console.log(textTable(summary(results)));
} finally {
  await sql.unsafe(definition);
  await sql.end();
  await db.close();
}

/** `values`' median and range, each with `digits` decimals: "1.23 (1.01–1.50)". */
function cell(values: number[], digits: number): string {
  return spreadCell(spread(values), digits);
}

/** Per window and build: the medians over the repetitions, with their ranges. */
function summary(results: { window: number; build: Build; r: Repetition }[]): string[][] {
  const rows: string[][] = [[
    "window",
    "A's backlog",
    "B p95 alone ms",
    "B p95 beside A ms",
    "p95 × alone (≤ 3)",
    "A's started while B waited, p95",
    "A alone tasks/s",
    "A beside B × alone (≥ 0.9)",
  ]];
  for (const window of WINDOWS) {
    for (const build of BUILDS) {
      const rs = results.filter((x) => x.window === window && x.build === build).map((x) => x.r);
      if (rs.length === 0) continue;
      rows.push([
        String(window),
        build === "bulk" ? "one transaction" : "one start_flow per run",
        cell(rs.map((r) => r.bAloneP95 * 1000), 1),
        cell(rs.map((r) => r.bBesideP95 * 1000), 1),
        cell(rs.map((r) => r.bBesideP95 / r.bAloneP95), 2),
        cell(rs.map((r) => r.aheadP95), 0),
        cell(rs.map((r) => r.aAlone), 0),
        cell(rs.map((r) => r.aBeside / r.aAlone), 2),
      ]);
    }
  }
  return rows;
}
