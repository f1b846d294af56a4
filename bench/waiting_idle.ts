/**
 * `deno run -A bench/waiting_idle.ts [--tasks N] [--waits N] [--rounds N]`
 *
 * What waiting runs cost the work around them (docs/waiting.md): one worker's throughput on a
 * single-step flow with no waiting run, then with `--waits` (default 10,000) runs waiting for an
 * event (a timeout a day away, so the tick's index holds them all), alternating for `--rounds`
 * rounds of `--tasks` tasks each. Prints tasks per second per round and the ratio of the medians.
 * Figures only; nothing here asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { Flow } from "../mod.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { singleStep } from "./flows.ts";
import { startWorkers, stopWorkers } from "./engine.ts";

/** The value after `--name` on the command line, as a number; `fallback` when absent. */
function flag(name: string, fallback: number): number {
  const i = Deno.args.indexOf(`--${name}`);
  const value = i < 0 ? fallback : Number(Deno.args[i + 1]);
  if (!Number.isInteger(value) || value < 1) throw new Error(`--${name} needs a whole number`);
  return value;
}
const tasks = flag("tasks", 5000);
const waits = flag("waits", 10000);
const rounds = flag("rounds", 3);

const work = singleStep("bench_wait_neighbour");
const waiting = new Flow<{ orderId: string }>({ slug: "bench_waiting" })
  .waitForEvent({ slug: "approval", event: "bench_approved", key: "$.orderId", timeout: "1 day" });

const db = await openPgflowDatabase();
const sql = postgres(db.url, { max: 4, onnotice: () => {} });
const settings = {
  url: db.url,
  sql,
  offsetMs: 0,
  tasks,
  latencyTasks: 0,
  rate: 1,
  maxConcurrent: 10,
  batchSize: 10,
  pollIntervalMs: 100,
  maxPollSeconds: 2,
};

async function round(): Promise<number> {
  const workers = await startWorkers(settings, [{ target: work }]);
  try {
    const since = await dbNow(sql);
    await startBacklog(sql, [work.slug], tasks);
    await waitRunsCompleted(sql, [work.slug], since, tasks);
    const window = await taskWindow(sql, [work.slug], since);
    return window.tasks / window.seconds;
  } finally {
    await stopWorkers(workers);
  }
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
try {
  // Compile both flows (a worker of each, stopped at once).
  await stopWorkers(await startWorkers(settings, [{ target: work }, { target: waiting }]));
  const without: number[] = [];
  const withWaits: number[] = [];
  for (let r = 0; r < rounds; r++) {
    await sql`delete from pgflow.step_states where flow_slug = 'bench_waiting'`;
    await sql`delete from pgflow.runs where flow_slug = 'bench_waiting'`;
    without.push(await round());
    await sql`select pgflow.start_flow('bench_waiting', jsonb_build_object('orderId', 'W-' || i))
              from generate_series(1, ${waits}) i`;
    await sql`analyze pgflow.step_states`;
    withWaits.push(await round());
  }
  const fmt = (xs: number[]) => xs.map((x) => x.toFixed(0)).join(", ");
  console.log(`tasks per round: ${tasks}; waiting runs: ${waits}; rounds: ${rounds}`);
  console.log(
    `no waiting run:        ${fmt(without)} tasks/s (median ${median(without).toFixed(0)})`,
  );
  console.log(
    `${waits} waiting runs: ${fmt(withWaits)} tasks/s (median ${median(withWaits).toFixed(0)})`,
  );
  console.log(`ratio (with / without): ${(median(withWaits) / median(without)).toFixed(3)}`);
} finally {
  await sql.end();
  await db.close();
}
