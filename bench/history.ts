/**
 * `deno run -A bench/history.ts [--runs N] [--repeat N] [--query-repeat N] [--tasks N]
 * [--out PATH | --no-write]`
 *
 * Flat cost as history grows: single-step tasks/s and pickup latency, and the time of the
 * operator's reads (`pgflow status`, `pgflow coverage`, the dashboard's), on an empty database and
 * on one holding `N` finished runs (default 1,000,000 completed, plus one failed per 100) and their
 * archived messages. The history is written set-based, in the shape the engine leaves a finished
 * run in (runs, step_states, step_tasks, task_attempts for the failures, and the queue's PGMQ
 * archive), for the benchmark's own plain flow, compiled by its worker. Two durable throw-away
 * servers are started (DATABASE_URL is refused) and measured in interleaved rounds. Writes a
 * Markdown table (default bench/history.md). The load skips triggers and foreign-key checks with
 * `session_replication_role = replica` (the servers' superuser may).
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import type { Sql } from "../mod.ts";
import { queueCoverage, WORKER_OPTIONS } from "../tools.ts";
import { readOverview } from "../src/cli/dashboard/queries.ts";
import { readOnly } from "../src/cli/dashboard/read_only.ts";
import { readRun } from "../src/cli/dashboard/run_view.ts";
import { searchRuns } from "../src/cli/dashboard/search.ts";
import { statusLines } from "../src/cli/status.ts";
import { clockOffsetMs } from "./clock.ts";
import { type EngineResult, type EngineSettings, singleStepScenario } from "./engine.ts";
import { plainFlow } from "./flows.ts";
import { spread, spreadCell } from "./repeat.ts";
import { fixed, markdownTable, median, ratio } from "./stats.ts";

/** Options of the history benchmark. */
export interface HistoryOptions {
  /** Completed runs loaded as history. */
  readonly runs: number;
  /** Rounds of the throughput and latency scenario on each side (empty, loaded). */
  readonly repeat: number;
  /** Repetitions of each read (the median is reported). */
  readonly queryRepeat: number;
}

/** One read's median time, empty and with the history. */
export interface QueryTiming {
  readonly name: string;
  readonly emptyMs: number;
  readonly loadedMs: number;
}

/** Everything the history benchmark measured. */
export interface HistoryFigures {
  readonly runs: number;
  readonly failedRuns: number;
  readonly loadSeconds: number;
  /** The server's version line. */
  readonly postgres: string;
  /** Table sizes after the load (MB, with indexes). */
  readonly sizes: readonly { table: string; mb: number }[];
  readonly empty: readonly RoundResult[];
  readonly loaded: readonly RoundResult[];
  readonly queries: readonly QueryTiming[];
}

/** The single step scenario measured on both sides: the plain flow, one worker. */
const SCENARIO = "plain flow queue";

/** Runs loaded per statement: bounds each transaction's size and shows progress. */
const CHUNK = 100_000;

/**
 * Loads `runs` completed runs of the one-step flow `flowSlug` (and one failed run per 100) as
 * history ended before now, with their tasks and archived messages; returns the failed count.
 * Triggers and foreign-key checks are skipped for the load (`session_replication_role`): the rows
 * are consistent by construction, and a run event per history row would mean nothing.
 *
 * @example
 * ```ts ignore
 * await loadHistory(sql, "bench_plain", 1_000_000, console.error);
 * ```
 */
export async function loadHistory(
  sql: postgres.Sql,
  flowSlug: string,
  runs: number,
  log: (text: string) => void = () => {},
): Promise<number> {
  const steps = await sql<{ step_slug: string; queue_name: string }[]>`
    select step_slug, queue_name from pgflow.steps where flow_slug = ${flowSlug}`;
  if (steps.length !== 1) {
    throw new Error(`loadHistory needs a compiled one-step flow; ${flowSlug} has ${steps.length}`);
  }
  const [{ step_slug: step, queue_name: queue }] = steps;
  const [{ archive, seq }] = await sql<{ archive: string; seq: string }[]>`
    select pgmq.format_table_name(${queue}, 'a') as archive,
           pg_get_serial_sequence('pgmq.' || pgmq.format_table_name(${queue}, 'q'), 'msg_id') as seq`;
  const failed = Math.floor(runs / 100);
  const total = runs + failed;
  // A block of message ids no live message can take: the history's messages were sent long ago.
  const [{ first }] = await sql<{ first: string }[]>`
    select (nextval(${seq}::regclass) + 1)::text as first`;
  await sql`select setval(${seq}::regclass, ${first}::bigint + ${total})`;
  for (let from = 1; from <= total; from += CHUNK) {
    const to = Math.min(total, from + CHUNK - 1);
    await sql.begin(async (tx) => {
      await tx`set local session_replication_role = replica`;
      // Run i started 2 s after run i - 1 and the last ended a minute ago: a month of history.
      // Every 100th run failed after three attempts.
      await tx`
        create temp table h on commit drop as
        select i, gen_random_uuid() as run_id, ${first}::bigint + i as msg_id,
               i % 100 = 0 as failed,
               now() - interval '1 minute' - make_interval(secs => (${total} - i) * 2.0) as t0,
               ('00000000-0000-4000-8000-' || lpad(to_hex(i % 7), 12, '0'))::uuid as worker
        from generate_series(${from}::int, ${to}::int) i`;
      await tx`
        insert into pgflow.runs (run_id, flow_slug, status, input, output, remaining_steps,
                                 error_message, started_at, completed_at, failed_at)
        select run_id, ${flowSlug}, case when failed then 'failed' else 'completed' end, '{}'::jsonb,
               case when failed then null else jsonb_build_object(${step}::text, null) end,
               case when failed then 1 else 0 end,
               case when failed then 'bench: simulated failure' end,
               t0, case when not failed then t0 + interval '37 ms' end,
               case when failed then t0 + interval '3 s' end
        from h`;
      await tx`
        insert into pgflow.step_states (run_id, flow_slug, step_slug, status, remaining_deps,
                                        remaining_tasks, initial_tasks, output, error_message,
                                        created_at, started_at, completed_at, failed_at)
        select run_id, ${flowSlug}, ${step}, case when failed then 'failed' else 'completed' end,
               0, case when failed then 1 else 0 end, 1, null,
               case when failed then 'bench: simulated failure' end,
               t0, t0, case when not failed then t0 + interval '35 ms' end,
               case when failed then t0 + interval '3 s' end
        from h`;
      await tx`
        insert into pgflow.step_tasks (run_id, flow_slug, step_slug, task_index, status,
                                       queue_name, message_id, attempts_count, output,
                                       error_message, last_worker_id, queued_at, started_at,
                                       completed_at, failed_at)
        select run_id, ${flowSlug}, ${step}, 0, case when failed then 'failed' else 'completed' end,
               ${queue}, msg_id, case when failed then 3 else 1 end, null,
               case when failed then 'bench: simulated failure' end, worker, t0,
               t0 + interval '24 ms', case when not failed then t0 + interval '35 ms' end,
               case when failed then t0 + interval '3 s' end
        from h`;
      await tx`
        insert into pgflow.task_attempts (run_id, step_slug, task_index, attempt, worker_id,
                                          started_at, ended_at, outcome, error_message)
        select run_id, ${step}, 0, a, worker, t0 + make_interval(secs => a - 1),
               t0 + make_interval(secs => a - 1) + interval '10 ms', 'failed',
               'bench: simulated failure'
        from h cross join generate_series(1, 3) a where failed`;
      await tx.unsafe(
        `insert into pgmq.${quoteIdent(archive)}
           (msg_id, read_ct, enqueued_at, archived_at, vt, message, headers)
         select msg_id, case when failed then 3 else 1 end, t0, t0 + interval '33 ms',
                t0 + interval '62 s',
                jsonb_build_object('run_id', run_id, 'flow_slug', $1::text,
                                   'step_slug', $2::text, 'task_index', 0),
                null
         from h`,
        [flowSlug, step],
      );
    });
    log(`history: ${to.toLocaleString("en")} of ${total.toLocaleString("en")} runs loaded`);
  }
  // What autovacuum would have done to tables this old: statistics and the visibility map.
  for (const table of ["pgflow.runs", "pgflow.step_states", "pgflow.step_tasks"]) {
    await sql.unsafe(`vacuum (analyze) ${table}`);
  }
  await sql.unsafe(`vacuum (analyze) pgflow.task_attempts`);
  await sql.unsafe(`vacuum (analyze) pgmq.${quoteIdent(archive)}`);
  return failed;
}

function quoteIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** A named read, as the CLI and the dashboard send it. */
type Probe = [string, (sql: Sql) => Promise<unknown>];

/** The reads timed: each through the same function the command or the page calls. */
function probes(url: string, oldRunId: string): Probe[] {
  const overview = { staleAfterSeconds: 30, queuedAfterSeconds: 60, limit: 20 };
  return [
    ["pgflow status", (sql) => statusLines(sql, url, 30)],
    ["pgflow coverage", (sql) => queueCoverage(sql, undefined, 30)],
    [
      "dashboard overview (every panel)",
      (sql) => readOnly(sql, (tx) => readOverview(tx, overview)),
    ],
    ["dashboard runs: latest 50", (sql) => readOnly(sql, (tx) => searchRuns(tx, { limit: 50 }))],
    [
      "dashboard runs: failed",
      (sql) => readOnly(sql, (tx) => searchRuns(tx, { status: "failed", limit: 50 })),
    ],
    [
      "dashboard runs: started",
      (sql) => readOnly(sql, (tx) => searchRuns(tx, { status: "started", limit: 50 })),
    ],
    [
      "dashboard runs: flow + completed",
      (sql) =>
        readOnly(
          sql,
          (tx) => searchRuns(tx, { flow: plainFlow.slug, status: "completed", limit: 50 }),
        ),
    ],
    [
      "dashboard runs: id prefix",
      (sql) => readOnly(sql, (tx) => searchRuns(tx, { idPrefix: oldRunId.slice(0, 6), limit: 50 })),
    ],
    ["dashboard run view (an old run)", (sql) => readOnly(sql, (tx) => readRun(tx, oldRunId))],
  ];
}

/**
 * The median wall-clock time (ms) of each read over `repeat` repetitions, after one unmeasured
 * warm-up, on a connection of its own like the CLI's.
 *
 * @example
 * ```ts ignore
 * const ms = await timeReads(url, 5);
 * ```
 */
export async function timeReads(url: string, repeat: number): Promise<Map<string, number>> {
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    const [row] = await sql<{ run_id: string }[]>`
      select run_id::text from pgflow.runs where status in ('completed', 'failed')
      order by started_at limit 1`;
    const out = new Map<string, number>();
    for (const [name, read] of probes(url, row?.run_id ?? "00000000-0000-4000-8000-000000000000")) {
      await read(sql as unknown as Sql);
      const times: number[] = [];
      for (let i = 0; i < repeat; i++) {
        const t0 = performance.now();
        await read(sql as unknown as Sql);
        times.push(performance.now() - t0);
      }
      out.set(name, median(times));
    }
    return out;
  } finally {
    await sql.end();
  }
}

/** The engine settings of one database, as bench/main.ts uses them. */
export type HistorySettings = Omit<EngineSettings, "url" | "sql" | "offsetMs">;

async function settingsFor(
  url: string,
  sql: postgres.Sql,
  base: HistorySettings,
): Promise<EngineSettings> {
  return { ...base, url, sql, offsetMs: await clockOffsetMs(sql) };
}

/** One round's engine figures and the WAL the server wrote for it, per run started. */
export interface RoundResult extends EngineResult {
  /** WAL bytes per run (the drained and the paced ones). */
  readonly walBytesPerRun: number;
  /** Full-page images per run: first changes of a page since the last checkpoint. */
  readonly fpiPerRun: number;
}

async function round(s: EngineSettings): Promise<RoundResult> {
  // WAL is counted server-wide: nothing else runs on these servers during a round.
  await s.sql`select pg_stat_reset_shared('wal')`;
  const result = await singleStepScenario(s, SCENARIO, { target: plainFlow }, [plainFlow.slug]);
  const [wal] = await s.sql<{ bytes: number; fpi: number }[]>`
    select wal_bytes::float8 as bytes, wal_fpi::float8 as fpi from pg_stat_wal`;
  const runs = s.tasks + s.latencyTasks;
  return { ...result, walBytesPerRun: wal.bytes / runs, fpiPerRun: wal.fpi / runs };
}

/**
 * Opens two durable throw-away servers, loads `o.runs` finished runs into one, and measures both
 * in interleaved rounds (empty then loaded, loaded then empty, …), so load from elsewhere on the
 * machine falls on both sides alike. Each server gets one unmeasured warm-up round first (it also
 * compiles the flow). Standalone: it needs no database of the caller's, so bench/main.ts can call
 * it as a section of its own.
 *
 * @example
 * ```ts ignore
 * const figures = await measureHistory({ runs: 1_000_000, repeat: 3, queryRepeat: 5 }, {
 *   tasks: 3000, latencyTasks: 300, rate: 100, maxConcurrent: 10, batchSize: 10,
 *   pollIntervalMs: 50, maxPollSeconds: 2,
 * });
 * console.log(renderHistoryMarkdown(figures));
 * ```
 */
export async function measureHistory(
  o: HistoryOptions,
  base: HistorySettings,
  log: (text: string) => void = () => {},
): Promise<HistoryFigures> {
  if (Deno.env.get("DATABASE_URL")) {
    throw new Error(
      "the history benchmark compares two throw-away servers it starts itself; unset DATABASE_URL",
    );
  }
  const dbs = [
    await openPgflowDatabase({ durable: true }),
    await openPgflowDatabase({ durable: true }),
  ];
  const pools = dbs.map((db) => postgres(db.url, { max: 2, prepare: false, onnotice: () => {} }));
  try {
    const [emptyS, loadedS] = await Promise.all(
      dbs.map((db, i) => settingsFor(db.url, pools[i], base)),
    );
    log("warm-up round on each server");
    await round(emptyS);
    await round(loadedS);
    const t0 = performance.now();
    const failedRuns = await loadHistory(loadedS.sql, plainFlow.slug, o.runs, log);
    const loadSeconds = (performance.now() - t0) / 1000;
    // The load's dirty pages are written now, not during the first measured round.
    for (const sql of pools) await sql`checkpoint`;
    log(`history loaded in ${loadSeconds.toFixed(0)} s; timing the reads`);
    const emptyReads = await timeReads(emptyS.url, o.queryRepeat);
    const loadedReads = await timeReads(loadedS.url, o.queryRepeat);
    const empty: RoundResult[] = [];
    const loaded: RoundResult[] = [];
    for (let i = 1; i <= o.repeat; i++) {
      log(`${SCENARIO}, round ${i}/${o.repeat}`);
      if (i % 2 === 1) {
        empty.push(await round(emptyS));
        loaded.push(await round(loadedS));
      } else {
        loaded.push(await round(loadedS));
        empty.push(await round(emptyS));
      }
    }
    const sizes = await loadedS.sql<{ table: string; mb: number }[]>`
      select c.oid::regclass::text as table,
             (pg_total_relation_size(c.oid) / 1048576.0)::float8 as mb
      from pg_class c join pg_namespace n on n.oid = c.relnamespace
      where c.relkind = 'r'
        and (n.nspname = 'pgflow' or (n.nspname = 'pgmq' and c.relname like 'a\\_%'))
        and pg_total_relation_size(c.oid) > 1048576
      order by pg_total_relation_size(c.oid) desc`;
    const [{ version }] = await loadedS.sql<{ version: string }[]>`select version()`;
    return {
      runs: o.runs,
      failedRuns,
      loadSeconds,
      postgres: version.split(",")[0],
      sizes,
      empty,
      loaded,
      queries: [...emptyReads].map(([name, emptyMs]) => ({
        name,
        emptyMs,
        loadedMs: loadedReads.get(name) ?? NaN,
      })),
    };
  } finally {
    await Promise.all(pools.map((sql) => sql.end()));
    await Promise.all(dbs.map((db) => db.close()));
  }
}

function engineCells(results: readonly RoundResult[]) {
  return {
    tps: spread(results.map((r) => r.tasksPerSec)),
    p50: spread(results.map((r) => r.p50)),
    p95: spread(results.map((r) => r.p95)),
    wal: spread(results.map((r) => r.walBytesPerRun / 1024)),
    fpi: spread(results.map((r) => r.fpiPerRun)),
  };
}

/**
 * The figures as Markdown: the engine empty vs with history, then each read's time.
 *
 * @example
 * ```ts ignore
 * await Deno.writeTextFile("bench/history.md", renderHistoryMarkdown(figures));
 * ```
 */
export function renderHistoryMarkdown(f: HistoryFigures, about = ""): string {
  const e = engineCells(f.empty);
  const l = engineCells(f.loaded);
  const within = (a: number, b: number, higherIsBetter: boolean) => {
    const change = higherIsBetter ? (a - b) / a : (b - a) / a;
    return change <= 0.10 ? "yes" : "NO";
  };
  const engine = markdownTable([
    [
      "figure",
      "empty",
      `${f.runs.toLocaleString("en")} runs of history`,
      "history ÷ empty",
      "within 10 %",
    ],
    [
      "single-step tasks/s",
      spreadCell(e.tps, 0),
      spreadCell(l.tps, 0),
      ratio(l.tps.median / e.tps.median),
      within(e.tps.median, l.tps.median, true),
    ],
    [
      "pickup p50 ms",
      spreadCell(e.p50, 2),
      spreadCell(l.p50, 2),
      ratio(l.p50.median / e.p50.median),
      within(e.p50.median, l.p50.median, false),
    ],
    [
      "pickup p95 ms",
      spreadCell(e.p95, 2),
      spreadCell(l.p95, 2),
      ratio(l.p95.median / e.p95.median),
      "",
    ],
    [
      "WAL KiB per run",
      spreadCell(e.wal, 1),
      spreadCell(l.wal, 1),
      ratio(l.wal.median / e.wal.median),
      "",
    ],
    [
      "full-page images per run",
      spreadCell(e.fpi, 2),
      spreadCell(l.fpi, 2),
      // An empty database writes almost none: a ratio to ~0 says nothing.
      e.fpi.median >= 0.01 ? ratio(l.fpi.median / e.fpi.median) : "–",
      "",
    ],
  ]);
  const reads = markdownTable([
    ["read", "empty ms", "with history ms", "under 200 ms"],
    ...f.queries.map((q) => [
      q.name,
      fixed(q.emptyMs, 1),
      fixed(q.loadedMs, 1),
      q.loadedMs < 200 ? "yes" : "NO",
    ]),
  ]);
  const sizes = markdownTable([
    ["table", "MB with indexes"],
    ...f.sizes.map((t) => [t.table, fixed(t.mb, 0)]),
  ]);
  return [
    "# History benchmark: flat cost as history grows",
    "",
    `Produced by \`deno run -A bench/history.ts --runs ${f.runs} --repeat ${f.empty.length}\`.${
      about ? ` ${about}` : ""
    }`,
    "",
    `History: ${f.runs.toLocaleString("en")} completed runs and ${
      f.failedRuns.toLocaleString("en")
    } failed ones (three failed attempts each) of the plain one-step flow, with their step states, ` +
    "tasks and archived messages, loaded set-based in " +
    `${
      fixed(f.loadSeconds, 0)
    } s, then \`vacuum (analyze)\` (what autovacuum does to such tables).`,
    "",
    "## Engine",
    "",
    `The \`${SCENARIO}\` scenario of \`deno task bench\` (one worker, batch 10, concurrency 10), ` +
    `${f.empty.length} rounds on each of two servers (one empty, one with the history), ` +
    `interleaved, after a warm-up round on each; ${f.empty[0]?.tasks ?? 0} tasks drained and ` +
    "300 runs paced at 100/s per round; median (lowest–highest). WAL is the server's own count " +
    "(pg_stat_wal) per run started in the round.",
    "",
    engine,
    "",
    "The run ids are random UUIDs, and runs, step_states and step_tasks are keyed by run id " +
    "first, so each new run changes a leaf page anywhere in those three indexes; the first change " +
    "of a page after a checkpoint writes the whole page to WAL (full_page_writes). On an empty " +
    "database the indexes are a few pages; with the history they are ~20,000, so the WAL per run " +
    "grows until every page has been written once in the checkpoint cycle. Both servers were " +
    "checkpointed after the load, before the rounds.",
    "",
    "## Operator reads",
    "",
    "Wall clock through the functions the CLI and the dashboard call, median of repetitions after " +
    "a warm-up, one connection.",
    "",
    reads,
    "",
    "## Sizes with history",
    "",
    sizes,
    "",
  ].join("\n");
}

function parseHistoryArgs(argv: readonly string[]) {
  const o = { runs: 1_000_000, repeat: 5, queryRepeat: 5, tasks: 25_000, out: "", write: true };
  o.out = new URL("./history.md", import.meta.url).pathname;
  const positive = (flag: string, text: string | undefined): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < 1) {
      console.error(`${flag} must be a whole number of at least 1, got ${JSON.stringify(text)}`);
      Deno.exit(2);
    }
    return n;
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    if (flag === "--runs") o.runs = positive(flag, argv[++i]);
    else if (flag === "--repeat") o.repeat = positive(flag, argv[++i]);
    else if (flag === "--query-repeat") o.queryRepeat = positive(flag, argv[++i]);
    else if (flag === "--tasks") o.tasks = positive(flag, argv[++i]);
    else if (flag === "--out") o.out = argv[++i] ?? "";
    else if (flag === "--no-write") o.write = false;
    else {
      console.error(
        `unknown option ${JSON.stringify(flag)}; use --runs N, --repeat N, --query-repeat N, ` +
          "--tasks N, --out PATH or --no-write",
      );
      Deno.exit(2);
    }
  }
  return o;
}

async function main() {
  const o = parseHistoryArgs(Deno.args);
  const started = performance.now();
  const log = (text: string) =>
    console.error(`[${((performance.now() - started) / 1000).toFixed(0).padStart(4)}s] ${text}`);
  const f = await measureHistory(o, {
    tasks: o.tasks,
    latencyTasks: 300,
    rate: 100,
    maxConcurrent: 10,
    batchSize: 10,
    pollIntervalMs: WORKER_OPTIONS.pollIntervalMs.default,
    maxPollSeconds: WORKER_OPTIONS.maxPollSeconds.default,
  }, log);
  const text = renderHistoryMarkdown(
    f,
    `${f.postgres}, two durable throw-away servers, ${navigator.hardwareConcurrency} cores, ` +
      `${new Date().toISOString().slice(0, 10)}.`,
  );
  console.log(text);
  if (o.write) {
    await Deno.writeTextFile(o.out, text);
    console.error(`written to ${o.out}`);
  }
}

if (import.meta.main) await main();
