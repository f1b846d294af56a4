/**
 * Where the time goes per task: runs a backlog of no-op runs through one real worker on a
 * throw-away durable server (fsync and synchronous_commit on) with `pg_stat_statements`
 * (`track = all`, so statements nested in plpgsql show) and prints, per task, the top statements
 * (calls, execution ms, rows), WAL bytes and records, rows written per table, and the server's CPU
 * time per task (every server process's user and system time, from /proc: unlike the rates, it
 * does not grow when other programs keep the cores busy, so two SQL versions compare on a loaded
 * machine), and this process's own CPU time per task (the workers run in it).
 *
 *   deno run -A bench/profile.ts [--tasks 2000] [--scenario single|chain|both] [--reps 3]
 *                                [--schemas DIR] [--top 25] [--explain]
 *
 * `--schemas DIR` builds the database from declarative schema files (e.g. an older tree's
 * `supabase/schemas/`, copied with `git archive`) instead of the migrations, so two SQL versions
 * can be measured with the same worker code, interleaved: `--schemas A,B` alternates A and B for
 * each repetition on a fresh database each time, and prints the median per-task figures of each.
 * `--explain` also turns on auto_explain (analyze, buffers, nested statements) for the last
 * repetition and copies the server log to /tmp/pgflow-profile-explain.log.
 *
 * @module
 */
import postgres from "postgres";
import { parseArgs } from "node:util";
import { Flow, withStepQueues } from "../mod.ts";
import { createLogger, type FlowWorker, type Json, type WorkerTarget } from "../mod.ts";
import { anyWorker } from "./engine.ts";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applyMigrations, applySchemaFiles } from "../local/db_push.ts";
import { sleep } from "./clock.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    tasks: { type: "string", default: "2000" },
    scenario: { type: "string", default: "both" },
    reps: { type: "string", default: "3" },
    schemas: { type: "string" },
    top: { type: "string", default: "25" },
    explain: { type: "boolean", default: false },
  },
});

const TASKS = Number(args.tasks);
const REPS = Number(args.reps);
const TOP = Number(args.top);
const variants: (string | undefined)[] = args.schemas ? args.schemas.split(",") : [undefined];
const scenarios = args.scenario === "both" ? ["single", "chain"] : [args.scenario!];

const noop = (): null => null;
const single = withStepQueues(new Flow<Json>({ slug: "prof_single" }).step({ slug: "work" }, noop));
const chain = withStepQueues(
  new Flow<Json>({ slug: "prof_chain" })
    .step({ slug: "a" }, noop)
    .step({ slug: "b", dependsOn: ["a"] }, noop)
    .step({ slug: "c", dependsOn: ["b"] }, noop),
);

/** One profiled run's per-task figures. */
interface Profile {
  tasks: number;
  seconds: number;
  statements: { query: string; toplevel: boolean; calls: number; ms: number; rows: number }[];
  walBytes: number;
  walRecords: number;
  walFpi: number;
  tables: { name: string; ins: number; upd: number; hot: number; del: number }[];
  /** pgflow's indexes on tables the drain wrote, with how often a query used each (per task). */
  indexes: { name: string; scans: number }[];
  /** The server's CPU milliseconds per task (see {@link serverCpuSeconds}). */
  cpuMs: number;
  /** This process's CPU milliseconds per task: the workers' own cost (and the polling here). */
  workerCpuMs: number;
}

const MARK = "/* profile */";

async function profileOnce(
  variant: string | undefined,
  scenario: string,
  explain: boolean,
): Promise<Profile> {
  const server = await startLocalPostgres({ durable: true });
  try {
    let sql = postgres(server.url, { max: 1, onnotice: () => {} });
    await sql.unsafe(
      `alter system set shared_preload_libraries = 'pg_stat_statements'${
        explain ? ", 'auto_explain'" : ""
      }`,
    );
    await sql.end();
    await server.stop();
    await server.start();
    sql = postgres(server.url, { max: 2, onnotice: () => {} });
    // Only a loaded module's settings can be set: after the restart.
    const settings = [["pg_stat_statements.track", "all"]];
    if (explain) {
      settings.push(
        ["auto_explain.log_min_duration", "0"],
        ["auto_explain.log_analyze", "on"],
        ["auto_explain.log_buffers", "on"],
        ["auto_explain.log_nested_statements", "on"],
        ["auto_explain.sample_rate", "0.02"],
      );
    }
    for (const [k, v] of settings) await sql.unsafe(`alter system set ${k} = '${v}'`);
    await sql`select pg_reload_conf()`;
    await sleep(200);
    await sql`create extension pg_stat_statements`;
    await installPgmq(sql);
    if (variant) await applySchemaFiles(sql, variant);
    else await applyMigrations(sql);
    await sql`select pgflow.set_local_development(true)`;

    const target: WorkerTarget = scenario === "single" ? single : chain;
    const slug = scenario === "single" ? "prof_single" : "prof_chain";
    const workers: FlowWorker[] = [];
    const specs = scenario === "single"
      ? [{ stepSlug: "work" }]
      : ["a", "b", "c"].map((stepSlug) => ({ stepSlug }));
    for (const spec of specs) {
      const w = anyWorker(target, {
        connectionString: server.url,
        ...spec,
        maxConcurrent: 10,
        batchSize: 10,
        pollIntervalMs: 50,
        maxPollSeconds: 2,
        functionName: "profile",
        logger: createLogger({ level: "error" }),
      });
      await w.start();
      workers.push(w);
    }
    const runs = scenario === "single" ? TASKS : Math.round(TASKS / 3);
    // Warm-up: plans cached, tables and indexes past their first pages.
    await startRuns(sql, slug, 50);
    await waitDone(sql, slug, 50);
    // Backends flush table and WAL counters at most once a second, at the end of a transaction:
    // wait past a whole poll (2 s) and a flush so the warm-up's counts land before the reset.
    await sleep(4500);

    await sql.unsafe(`${MARK} select pg_stat_statements_reset()`);
    await sql.unsafe(`${MARK} select pg_stat_reset()`);
    const [w0] = await sql.unsafe(
      `${MARK} select wal_records::float8 as r, wal_fpi::float8 as f,
              (pg_current_wal_lsn() - '0/0')::float8 as b from pg_stat_wal`,
    );
    const cpu0 = await serverCpuSeconds(server.dataDir);
    const self0 = await ownCpuSeconds();
    const t0 = performance.now();
    await startRuns(sql, slug, runs);
    await waitDone(sql, slug, 50 + runs);
    const seconds = (performance.now() - t0) / 1000;
    const self1 = await ownCpuSeconds();
    const cpu1 = await serverCpuSeconds(server.dataDir);
    const [{ lsn }] = await sql.unsafe(
      `${MARK} select (pg_current_wal_lsn() - '0/0')::float8 as lsn`,
    );
    await Promise.all(workers.map((w) => w.stop()));
    // Table and WAL counters are flushed by each backend at most once a second and when it exits.
    await sleep(1500);
    const [w1] = await sql.unsafe(
      `${MARK} select wal_records::float8 as r, wal_fpi::float8 as f from pg_stat_wal`,
    );
    w1.b = lsn;
    const tasks = scenario === "single" ? runs : runs * 3;
    const statements = (await sql.unsafe(
      `${MARK} select query, toplevel, calls::float8 as calls, total_exec_time as ms, rows::float8 as rows
       from pg_stat_statements
       where query not like '%/* profile */%'
       order by total_exec_time desc`,
    )).map((r) => ({
      query: String(r.query).replace(/\s+/g, " "),
      toplevel: r.toplevel as boolean,
      calls: (r.calls as number) / tasks,
      ms: (r.ms as number) / tasks,
      rows: (r.rows as number) / tasks,
    }));
    const tables = (await sql.unsafe(
      `${MARK} select schemaname || '.' || relname as name, n_tup_ins::float8 as ins,
              n_tup_upd::float8 as upd, n_tup_hot_upd::float8 as hot, n_tup_del::float8 as del
       from pg_stat_user_tables
       where n_tup_ins + n_tup_upd + n_tup_del > 0
       order by n_tup_ins + n_tup_upd + n_tup_del desc`,
    )).map((r) => ({
      name: r.name as string,
      ins: (r.ins as number) / tasks,
      upd: (r.upd as number) / tasks,
      hot: (r.hot as number) / tasks,
      del: (r.del as number) / tasks,
    }));
    // An index no query of the drain used still costs every insert (and every update that is not
    // HOT) an entry, unless its predicate leaves the row out.
    const indexes = (await sql.unsafe(
      `${MARK} select i.relname || '.' || i.indexrelname as name, i.idx_scan::float8 as scans
       from pg_stat_user_indexes i join pg_stat_user_tables t on t.relid = i.relid
       where i.schemaname = 'pgflow' and t.n_tup_ins + t.n_tup_upd > 0
       order by i.relname, i.indexrelname`,
    )).map((r) => ({ name: r.name as string, scans: (r.scans as number) / tasks }));
    if (explain) {
      await Deno.copyFile(`${server.dataDir}/server.log`, "/tmp/pgflow-profile-explain.log");
    }
    await sql.end();
    return {
      tasks,
      seconds,
      statements,
      walBytes: (w1.b - w0.b) / tasks,
      walRecords: (w1.r - w0.r) / tasks,
      walFpi: (w1.f - w0.f) / tasks,
      tables,
      indexes,
      cpuMs: (cpu1 - cpu0) * 1000 / tasks,
      workerCpuMs: (self1 - self0) * 1000 / tasks,
    };
  } finally {
    await server.destroy();
  }
}

/**
 * User and system CPU seconds of the server so far: the postmaster's own and its reaped children's
 * (an exited backend's time is added to its parent's when it is reaped), and every live child's.
 * Linux only; /proc counts in clock ticks of 1/100 s.
 */
async function serverCpuSeconds(dataDir: string): Promise<number> {
  const pid = Number((await Deno.readTextFile(`${dataDir}/data/postmaster.pid`)).split("\n")[0]);
  let ticks = 0;
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const stat = await Deno.readTextFile(`/proc/${entry.name}/stat`).catch(() => "");
    // The fields after the command's closing parenthesis, from the state (field 3) on.
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    if (Number(entry.name) === pid) ticks += f[11] + f[12] + f[13] + f[14];
    else if (f[1] === pid) ticks += f[11] + f[12];
  }
  return ticks / 100;
}

/** User and system CPU seconds of this process so far (Linux: /proc/self/stat, 1/100 s ticks). */
async function ownCpuSeconds(): Promise<number> {
  const stat = await Deno.readTextFile("/proc/self/stat");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
  return (f[11] + f[12]) / 100;
}

async function startRuns(sql: postgres.Sql, slug: string, n: number): Promise<void> {
  // Not marked: starting runs is part of each task's cost.
  await sql.unsafe(
    `select count(pgflow.start_flow($1, '{}'::jsonb)) from generate_series(1, $2::int)`,
    [slug, n],
  );
}

async function waitDone(sql: postgres.Sql, slug: string, n: number): Promise<void> {
  const deadline = performance.now() + 300_000;
  for (;;) {
    const [{ done }] = await sql.unsafe(
      `${MARK} select count(*)::int as done from pgflow.runs where flow_slug = $1 and status = 'completed'`,
      [slug],
    );
    if (done >= n) return;
    if (performance.now() > deadline) throw new Error(`only ${done} of ${n} runs completed`);
    await sleep(100);
  }
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0
    ? 0
    : s.length % 2
    ? s[(s.length - 1) / 2]
    : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

function f(x: number, d = 3): string {
  return x.toFixed(d);
}

function sleepMs(p: Profile): number {
  return p.statements.filter((s) => s.query.includes("pg_sleep")).reduce((a, s) => a + s.ms, 0);
}

function report(label: string, profiles: Profile[]): void {
  const m = (pick: (p: Profile) => number) => median(profiles.map(pick));
  console.log(`\n## ${label} (median of ${profiles.length}; ${profiles[0].tasks} tasks each)\n`);
  console.log(
    `tasks/s ${f(m((p) => p.tasks / p.seconds), 0)} (runs: ${
      profiles.map((p) => f(p.tasks / p.seconds, 0)).join(" / ")
    })`,
  );
  console.log(
    `server CPU ms/task ${f(m((p) => p.cpuMs))} (runs: ${
      profiles.map((p) => f(p.cpuMs)).join(" / ")
    })`,
  );
  console.log(
    `worker CPU ms/task ${f(m((p) => p.workerCpuMs))} (runs: ${
      profiles.map((p) => f(p.workerCpuMs)).join(" / ")
    })`,
  );
  const top = (p: Profile) => p.statements.filter((s) => s.toplevel);
  console.log(
    `server exec ms/task (top-level statements, less pg_sleep) ${
      f(m((p) => top(p).reduce((a, s) => a + s.ms, 0) - sleepMs(p)))
    }; round trips/task ${
      f(m((p) => top(p).reduce((a, s) => a + s.calls, 0)), 2)
    }; nested statements/task ${
      f(m((p) => p.statements.filter((s) => !s.toplevel).reduce((a, s) => a + s.calls, 0)), 1)
    }`,
  );
  console.log(
    `WAL/task: ${f(m((p) => p.walBytes), 0)} bytes, ${f(m((p) => p.walRecords), 1)} records, ${
      f(m((p) => p.walFpi), 2)
    } full-page images (runs: ${profiles.map((p) => f(p.walBytes, 0)).join(" / ")} bytes)`,
  );
  console.log("\n| table | ins/task | upd/task | hot/task | del/task |\n|---|---:|---:|---:|---:|");
  for (const t of profiles[0].tables) {
    const pick = (p: Profile, k: "ins" | "upd" | "hot" | "del") =>
      p.tables.find((x) => x.name === t.name)?.[k] ?? 0;
    console.log(
      `| ${t.name.replace(/_[0-9a-f]{8,}/, "_…")} | ${f(m((p) => pick(p, "ins")), 2)} | ${
        f(m((p) => pick(p, "upd")), 2)
      } | ${f(m((p) => pick(p, "hot")), 2)} | ${f(m((p) => pick(p, "del")), 2)} |`,
    );
  }
  console.log("\n| pgflow index (tables written) | scans/task |\n|---|---:|");
  for (const ix of profiles[0].indexes) {
    const scans = (p: Profile) => p.indexes.find((x) => x.name === ix.name)?.scans ?? 0;
    console.log(`| ${ix.name} | ${f(m(scans), 2)} |`);
  }
  console.log(
    `\n| statement (top ${TOP} by exec time) | top | calls/task | ms/task | rows/task |\n|---|---|---:|---:|---:|`,
  );
  const key = (s: Profile["statements"][number]) => `${s.toplevel}|${s.query}`;
  for (const s of profiles[0].statements.slice(0, TOP)) {
    const pick = (p: Profile, k: "calls" | "ms" | "rows") =>
      p.statements.find((x) => key(x) === key(s))?.[k] ?? 0;
    console.log(
      `| \`${s.query.slice(0, 110).replaceAll("|", "\\|")}\` | ${s.toplevel ? "y" : ""} | ${
        f(m((p) => pick(p, "calls")), 2)
      } | ${f(m((p) => pick(p, "ms")), 4)} | ${f(m((p) => pick(p, "rows")), 2)} |`,
    );
  }
}

const results = new Map<string, Profile[]>();
for (let rep = 0; rep < REPS; rep++) {
  for (const scenario of scenarios) {
    for (const variant of variants) {
      const label = `${scenario}${variant ? ` [${variant}]` : ""}`;
      const p = await profileOnce(variant, scenario, args.explain && rep === REPS - 1);
      console.error(`${label} rep ${rep + 1}: ${f(p.tasks / p.seconds, 0)} tasks/s`);
      results.set(label, [...(results.get(label) ?? []), p]);
    }
  }
}
for (const [label, profiles] of results) report(label, profiles);
