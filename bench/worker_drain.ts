/**
 * The worker's side of a single-step drain: one worker at concurrency 10 and batch 10, in a
 * process of its own, drains a backlog of no-op tasks (built in one transaction while it waits
 * idle) on a throw-away durable server. Per task: the worker process's CPU time (user + system,
 * from /proc), the server's CPU time (every backend but the measuring ones), the top-level
 * statements (round trips) by function and the transactions, and the mean number of the
 * worker's backends busy on the server (sampled every 10 ms: how much of the time a statement of
 * the worker is in flight). Tasks/s is from the worker's first handler call to its last report.
 *
 *   deno run -A bench/worker_drain.ts [--tasks 5000] [--reps 3] [--trees DIR,DIR] [--cpu-prof DIR]
 *                                     [--flow single|chain] [--settings bench|defaults]
 *
 * `--trees` names source trees (each with a `mod.ts`, e.g. another commit's `git archive` in /tmp)
 * whose workers are measured against the same server, interleaved (the order alternates each
 * repetition); the default is this tree alone. The server's tables are used: each repetition
 * adds a backlog to the same database. `--cpu-prof DIR` writes each worker process's V8 CPU profile
 * there (Deno's `--cpu-prof`). `--flow chain` drains 3-step chains (a → b → c on one queue, one
 * worker) instead: `--tasks` counts their tasks, a third of them runs. `--settings defaults` starts
 * the worker through the public API at its defaults (a logger at `info` into an in-process sink,
 * as bench/cells.ts's public-defaults cell), rather than the bench's settings.
 *
 * @module
 */
import postgres from "postgres";
import { parseArgs } from "node:util";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applyMigrations } from "../local/db_push.ts";
import { ServerProbe } from "./server_probe.ts";
import { sleep } from "./clock.ts";
import { median } from "./stats.ts";
import { jsonLines } from "./json_lines.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    tasks: { type: "string", default: "5000" },
    reps: { type: "string", default: "3" },
    trees: { type: "string" },
    "cpu-prof": { type: "string" },
    flow: { type: "string", default: "single" },
    settings: { type: "string", default: "bench" },
  },
});
const TASKS = Number(args.tasks);
const CHAIN = args.flow === "chain";
const SLUG = CHAIN ? "bench_drain_chain" : "bench_drain";
if (CHAIN && TASKS % 3 !== 0) {
  throw new Error(`--tasks ${TASKS}: a chain drain needs a multiple of 3`);
}
const REPS = Number(args.reps);
const here = new URL("..", import.meta.url).pathname;
const trees = (args.trees ?? here).split(",").map((t) => t.replace(/\/?$/, "/"));
const CHILD = new URL("./worker_drain_child.ts", import.meta.url).pathname;

/** One drain's per-task figures. */
interface Drain {
  tasksPerSecond: number;
  workerCpuUs: number;
  /** The kernel's part of it (system time: the socket's writes and reads). */
  workerSystemUs: number;
  serverCpuUs: number;
  /** Top-level statements per task, by the pgflow function they call (or the statement). */
  calls: Map<string, number>;
  /** Mean of the worker's backends active at a sample. */
  busy: number;
}

const MARK = "/* drain */";

async function drainOnce(url: string, sql: postgres.Sql, tree: string): Promise<Drain> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      "--config",
      `${here}deno.json`,
      ...(args["cpu-prof"] ? ["--cpu-prof", `--cpu-prof-dir=${args["cpu-prof"]}`] : []),
      CHILD,
      `${tree}mod.ts`,
      url,
      `${TASKS}`,
      CHAIN ? "chain" : "single",
      args.settings,
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const next = jsonLines<{ event?: string; seconds: number; cpuMs: number; systemMs: number }>(
    child.stdout,
    "the drain worker",
  );
  if ((await next()).event !== "ready") throw new Error("the worker did not start");
  const [{ pid }] = await sql.unsafe(`${MARK} select pg_backend_pid() as pid`);
  const probe = await ServerProbe.open(url, [pid]);
  await sql.unsafe(`${MARK} select pg_stat_statements_reset()`);
  // The backlog in one transaction: the worker sees all of it at its commit.
  await sql.unsafe(
    `${MARK} select count(pgflow.start_flow($1, '{}'::jsonb)) from generate_series(1, $2::int)`,
    [SLUG, CHAIN ? TASKS / 3 : TASKS],
  );
  await probe.start();
  const done = await next();
  const server = await probe.stop();
  await probe.close();
  await child.stdin.close();
  await child.status;
  const calls = new Map<string, number>();
  for (
    const r of await sql.unsafe(
      `${MARK} select query, calls::float8 as calls from pg_stat_statements
       where toplevel and query not like '%/* drain */%' and query not like '%pg_stat_activity%'`,
    )
  ) {
    const name = /pgflow\.(\w+)\(/.exec(String(r.query))?.[1] ??
      String(r.query).replace(/\s+/g, " ").slice(0, 40);
    calls.set(name, (calls.get(name) ?? 0) + (r.calls as number) / TASKS);
  }
  return {
    tasksPerSecond: TASKS / done.seconds,
    workerCpuUs: (done.cpuMs * 1000) / TASKS,
    workerSystemUs: (done.systemMs * 1000) / TASKS,
    serverCpuUs: (server.cpuMs * 1000) / TASKS,
    calls,
    busy: server.active / Math.max(1, server.samples),
  };
}

const server = await startLocalPostgres({ durable: true });
const results = new Map<string, Drain[]>(trees.map((t) => [t, []]));
try {
  let sql = postgres(server.url, { max: 1, onnotice: () => {} });
  await sql.unsafe(`alter system set shared_preload_libraries = 'pg_stat_statements'`);
  await sql.end();
  await server.stop();
  await server.start();
  sql = postgres(server.url, { max: 1, onnotice: () => {} });
  await sql`create extension pg_stat_statements`;
  await installPgmq(sql);
  await applyMigrations(sql);
  await sql`select pgflow.set_local_development(true)`;
  // A first drain per tree, not counted: the flow compiled, plans cached, pages warm.
  for (const tree of trees) await drainOnce(server.url, sql, tree);
  for (let rep = 0; rep < REPS; rep++) {
    const order = rep % 2 === 0 ? trees : [...trees].reverse();
    for (const tree of order) {
      const d = await drainOnce(server.url, sql, tree);
      results.get(tree)!.push(d);
      console.error(
        `rep ${rep + 1} ${tree}: ${d.tasksPerSecond.toFixed(0)} tasks/s, worker ${
          d.workerCpuUs.toFixed(0)
        } µs/task, server ${d.serverCpuUs.toFixed(0)} µs/task`,
      );
      await sleep(500);
    }
  }
  await sql.end();
} finally {
  await server.destroy();
}

const spread = (xs: number[], d = 0) =>
  `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
console.log(
  `\n| tree (${TASKS} tasks × ${REPS}) | tasks/s | worker CPU µs/task | of it system | ` +
    `server CPU µs/task | worker backends busy | statements/task |\n|---|---:|---:|---:|---:|---:|---|`,
);
for (const [tree, ds] of results) {
  const names = [...new Set(ds.flatMap((d) => [...d.calls.keys()]))];
  const calls = names.map((n) => `${n} ${median(ds.map((d) => d.calls.get(n) ?? 0)).toFixed(3)}`)
    .filter((s) => !s.endsWith(" 0.000"));
  console.log(
    `| ${tree} | ${spread(ds.map((d) => d.tasksPerSecond))} | ${
      spread(ds.map((d) => d.workerCpuUs))
    } | ${spread(ds.map((d) => d.workerSystemUs))} | ${spread(ds.map((d) => d.serverCpuUs))} | ${
      spread(ds.map((d) => d.busy), 2)
    } | ${calls.join(", ")} |`,
  );
}
