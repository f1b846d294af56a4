/**
 * Flow control on the bench (issue 43, items 3 and 6), each scenario on its own throw-away durable
 * server:
 *
 * - `exact`: concurrency limits hold exactly at full size. Two child processes
 *   (`flow_control_worker.ts`) of two workers each run `--tasks` tasks of a step limited to 3 per
 *   key over `--keys` keys; a separate connection counts the started tasks of every key from the
 *   task rows every 10 ms; one process is SIGKILLed mid-run and started again, and its tasks are
 *   taken back by stalled recovery. Then: the most started at once per key, every task completed
 *   once, each attempt's handler run once (the ledger the handler writes), nothing left behind.
 * - `cost`: what flow control costs a flow that uses none. The same no-limit flow, one worker, on
 *   the schema tree before flow control (`--before`, a git revision, extracted with `git archive`)
 *   and on this tree's migrations, alternated on fresh servers for `--reps` rounds: throughput of
 *   a backlog (`--backlog` tasks) and pickup p50 of paced runs, with each round's ratio.
 * - `limited`: one step limited to 3 per key over 50 keys against the same step without a limit,
 *   alternated on one server: tasks/s of a backlog.
 *
 *   deno run -A bench/flow_control.ts [--scenario exact|cost|limited|all] [--tasks 10000]
 *                                     [--keys 500] [--reps 3] [--before 8538dc6^1] [--backlog 3000]
 *
 * Nothing here asserts on speed; the exactness checks end the run with an error when one fails.
 *
 * @module
 */
import postgres from "postgres";
import { parseArgs } from "node:util";
import { createLogger, createWorker, Flow, type Json } from "../mod.ts";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applyMigrations, applySchemaFiles } from "../local/db_push.ts";
import { clockOffsetMs, sleep, wallMs } from "./clock.ts";
import { type EngineSettings, singleStepScenario } from "./engine.ts";
import { dbNow, taskWindow, waitRunsCompleted } from "./load.ts";
import { singleStep } from "./flows.ts";
import { median } from "./stats.ts";
import { EXACT_LIMIT, EXACT_SLUG } from "./flow_control_worker.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    scenario: { type: "string", default: "all" },
    tasks: { type: "string", default: "10000" },
    keys: { type: "string", default: "500" },
    reps: { type: "string", default: "3" },
    before: { type: "string", default: "8538dc6^1" },
    backlog: { type: "string", default: "3000" },
  },
});

/** A throw-away durable server with PGMQ and a pgflow schema (this tree's, or `schemas`). */
async function server(schemas?: string) {
  const pg = await startLocalPostgres({ durable: true });
  const sql = postgres(pg.url, { max: 4, onnotice: () => {} });
  await installPgmq(sql);
  if (schemas) await applySchemaFiles(sql, schemas);
  else await applyMigrations(sql);
  await sql`select pgflow.set_local_development(true)`;
  return {
    url: pg.url,
    sql,
    async close(): Promise<void> {
      await sql.end({ timeout: 5 });
      await pg.destroy();
    },
  };
}

/** Starts `n` runs of `slug` in one transaction, input `{k: "key<i mod keys>"}`. */
async function startKeyed(sql: postgres.Sql, slug: string, n: number, keys: number) {
  await sql.begin(async (tx) => {
    for (let done = 0; done < n; done += 1000) {
      const count = Math.min(1000, n - done);
      await tx`
        select count(pgflow.start_flow(${slug}, jsonb_build_object('k', 'key' || (i % ${keys}::int))))
        from generate_series(${done}::int, ${done + count - 1}::int) i`;
    }
  });
}

/** A worker child process; `ready` resolves once both its workers poll. */
function spawnWorkers(url: string) {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./flow_control_worker.ts", import.meta.url).pathname, url],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const ready = (async () => {
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("a worker process ended before it was ready");
      text += value;
    }
    // Keep reading so the child never blocks on a full pipe.
    (async () => {
      while (!(await reader.read()).done) { /* discard */ }
    })().catch(() => {});
  })();
  return { child, ready };
}

/** Figures of the exactness scenario. */
interface ExactResult {
  tasks: number;
  keys: number;
  samples: number;
  maxStarted: number;
  seconds: number;
  tasksPerSec: number;
  recovered: number;
  rerun: number;
  /** Seconds from the start to the kill, and tasks completed by then. */
  killedAt: { seconds: number; completed: number };
}

async function exact(tasks: number, keys: number): Promise<ExactResult> {
  const db = await server();
  const { sql } = db;
  const watch = postgres(db.url, { max: 1, onnotice: () => {} });
  try {
    await sql`create table bench_fc_ledger (run_id uuid not null, attempt int not null,
                                             pid int not null)`;
    let procs = [spawnWorkers(db.url), spawnWorkers(db.url)];
    await Promise.all(procs.map((p) => p.ready));

    let sampling = true;
    let samples = 0;
    let maxStarted = 0;
    const sampler = (async () => {
      while (sampling) {
        const at = wallMs();
        const [{ m }] = await watch<{ m: number }[]>`
          select coalesce(max(n), 0)::int as m from (
            select count(*) as n from pgflow.step_tasks
            where flow_slug = ${EXACT_SLUG} and status = 'started'
            group by limit_scope, limit_key) x`;
        samples++;
        maxStarted = Math.max(maxStarted, m);
        // Every 10 ms, or back to back when the count itself takes longer.
        await sleep(Math.max(0, 10 - (wallMs() - at)));
      }
    })();

    const t0 = wallMs();
    await startKeyed(sql, EXACT_SLUG, tasks, keys);
    const completed = async () =>
      (await sql<{ n: number }[]>`select count(*)::int as n from pgflow.step_tasks
                                  where flow_slug = ${EXACT_SLUG} and status = 'completed'`)[0].n;
    while (await completed() < tasks * 0.4) await sleep(100);
    // Killed mid-batch: its claimed tasks stay started until stalled recovery takes them back.
    procs[0].child.kill("SIGKILL");
    await procs[0].child.status;
    const killedAt = { seconds: (wallMs() - t0) / 1000, completed: await completed() };
    console.error(`exact: worker process ${procs[0].child.pid} killed at ${killedAt.completed}`);
    procs = [spawnWorkers(db.url), procs[1]];
    await procs[0].ready;
    const deadline = wallMs() + 600_000;
    while (await completed() < tasks) {
      if (wallMs() > deadline) throw new Error(`only ${await completed()} of ${tasks} completed`);
      await sleep(100);
    }
    const seconds = (wallMs() - t0) / 1000;
    sampling = false;
    await sampler;
    for (const p of procs) {
      await p.child.stdin.close();
      await p.child.status;
    }

    const [check] = await sql<
      {
        tasks: number;
        completed: number;
        unfinished: number;
        missing: number;
        twice: number;
        rerun: number;
        recovered: number;
        unexplained: number;
      }[]
    >`
      with t as (select * from pgflow.step_tasks where flow_slug = ${EXACT_SLUG}),
           l as (select run_id, attempt, count(*) as n from bench_fc_ledger group by run_id, attempt)
      select (select count(*) from t)::int as tasks,
             (select count(*) from t where status = 'completed')::int as completed,
             (select count(*) from t where status <> 'completed')::int as unfinished,
             -- A completed task whose completing attempt left no ledger row.
             (select count(*) from t where not exists (
                select 1 from l where l.run_id = t.run_id and l.attempt = t.attempts_count))::int
               as missing,
             (select count(*) from l where n > 1)::int as twice,
             (select count(*) from l where attempt > 1)::int as rerun,
             (select count(*) from pgflow.task_attempts a join t using (run_id, step_slug, task_index)
              where a.outcome = 'stalled')::int as recovered,
             -- A task run more than once without a recorded stalled or failed attempt.
             (select count(*) from t where t.attempts_count > 1 and t.attempts_count - 1 <> (
                select count(*) from pgflow.task_attempts a
                where (a.run_id, a.step_slug, a.task_index) = (t.run_id, t.step_slug, t.task_index)))::int
               as unexplained`;
    const problems = [
      check.tasks !== tasks && `${check.tasks} tasks, not ${tasks}`,
      check.unfinished > 0 && `${check.unfinished} tasks not completed`,
      check.missing > 0 && `${check.missing} completed tasks without a ledger row`,
      check.twice > 0 && `${check.twice} attempts whose handler ran twice`,
      check.unexplained > 0 && `${check.unexplained} tasks run again without a recorded attempt`,
      maxStarted > EXACT_LIMIT && `${maxStarted} tasks of one key started at once`,
      check.recovered === 0 && "no task was recovered: the kill tested nothing",
    ].filter((p): p is string => typeof p === "string");
    if (problems.length > 0) throw new Error(`flow-control exactness: ${problems.join("; ")}`);
    return {
      tasks: check.completed,
      keys,
      samples,
      maxStarted,
      seconds,
      tasksPerSec: tasks / seconds,
      recovered: check.recovered,
      rerun: check.rerun,
      killedAt,
    };
  } finally {
    await watch.end({ timeout: 5 });
    await db.close();
  }
}

/** Settings of the throughput and pickup scenarios (the headline cells' worker). */
function settings(url: string, sql: postgres.Sql, offsetMs: number, tasks: number): EngineSettings {
  return {
    url,
    sql,
    offsetMs,
    tasks,
    latencyTasks: 200,
    rate: 20,
    maxConcurrent: 10,
    batchSize: 10,
    pollIntervalMs: 50,
    maxPollSeconds: 2,
  };
}

/** One round of the cost scenario on a fresh server: tasks/s and pickup p50 of a plain flow. */
async function costOnce(
  backlog: number,
  schemas?: string,
): Promise<{ tasksPerSec: number; p50: number }> {
  const db = await server(schemas);
  try {
    const offsetMs = await clockOffsetMs(db.sql);
    const flow = singleStep("bench_fc_plain");
    const spec = { target: flow };
    // Warm-up on the same tables: connections opened, the hot path planned.
    await singleStepScenario(
      { ...settings(db.url, db.sql, offsetMs, 500), latencyTasks: 20 },
      "warm-up",
      spec,
      ["bench_fc_plain"],
    );
    const r = await singleStepScenario(
      settings(db.url, db.sql, offsetMs, backlog),
      "plain",
      spec,
      ["bench_fc_plain"],
    );
    return { tasksPerSec: r.tasksPerSec, p50: r.p50 };
  } finally {
    await db.close();
  }
}

async function cost(reps: number, before: string, backlog: number) {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-before-" });
  try {
    const archive = new Deno.Command("sh", {
      args: ["-c", `git archive "$1" supabase/schemas | tar -x -C "$2"`, "sh", before, dir],
    });
    const out = await archive.output();
    if (!out.success) {
      throw new Error(`git archive ${before}: ${new TextDecoder().decode(out.stderr)}`);
    }
    const rounds: {
      before: { tasksPerSec: number; p50: number };
      now: typeof rounds[0]["before"];
    }[] = [];
    for (let i = 0; i < reps; i++) {
      // Alternate which goes first, so a drift of the machine's load does not favour one.
      const a = i % 2 === 0 ? await costOnce(backlog, `${dir}/supabase/schemas`) : undefined;
      const now = await costOnce(backlog);
      const b = a ?? await costOnce(backlog, `${dir}/supabase/schemas`);
      rounds.push({ before: b, now });
      console.error(
        `cost round ${i + 1}: before ${b.tasksPerSec.toFixed(0)} tasks/s p50 ${
          b.p50.toFixed(1)
        } ms;` +
          ` now ${now.tasksPerSec.toFixed(0)} tasks/s p50 ${now.p50.toFixed(1)} ms`,
      );
    }
    return rounds;
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

const noop = (): null => null;

async function limited(reps: number) {
  const db = await server();
  try {
    const free = new Flow<Json>({ slug: "bench_fc_free" }).step({ slug: "work" }, noop);
    const capped = new Flow<Json>({ slug: "bench_fc_limited" }).step({
      slug: "work",
      concurrency: { limit: 3, key: "$.k" },
    }, noop);
    const rounds: { free: number; limited: number }[] = [];
    const measure = async (target: typeof free | typeof capped, slug: string, n: number) => {
      const worker = createWorker(target, {
        connectionString: db.url,
        maxConcurrent: 10,
        batchSize: 10,
        pollIntervalMs: 50,
        maxPollSeconds: 2,
        functionName: "bench_fc",
        logger: createLogger({ level: "warn" }),
      });
      await worker.start();
      try {
        const since = await dbNow(db.sql);
        await startKeyed(db.sql, slug, n, 50);
        await waitRunsCompleted(db.sql, [slug], since, n);
        const w = await taskWindow(db.sql, [slug], since);
        return w.tasks / w.seconds;
      } finally {
        await worker.stop();
      }
    };
    await measure(free, "bench_fc_free", 500);
    await measure(capped, "bench_fc_limited", 500);
    for (let i = 0; i < reps; i++) {
      const a = await measure(
        i % 2 === 0 ? free : capped,
        i % 2 === 0 ? "bench_fc_free" : "bench_fc_limited",
        3000,
      );
      const b = await measure(
        i % 2 === 0 ? capped : free,
        i % 2 === 0 ? "bench_fc_limited" : "bench_fc_free",
        3000,
      );
      const round = i % 2 === 0 ? { free: a, limited: b } : { free: b, limited: a };
      rounds.push(round);
      console.error(
        `limited round ${i + 1}: ${round.free.toFixed(0)} tasks/s free, ${
          round.limited.toFixed(0)
        } limited`,
      );
    }
    return rounds;
  } finally {
    await db.close();
  }
}

function spread(xs: number[]): string {
  return `${median(xs).toFixed(3)} (${Math.min(...xs).toFixed(3)}–${Math.max(...xs).toFixed(3)})`;
}

const which = args.scenario === "all" ? ["exact", "cost", "limited"] : [args.scenario!];
const reps = Number(args.reps);
const load = async () =>
  (await Deno.readTextFile("/proc/loadavg")).split(" ").slice(0, 3).join(" ");
console.log(`load average at start: ${await load()} (${navigator.hardwareConcurrency} cores)`);
if (which.includes("exact")) {
  const r = await exact(Number(args.tasks), Number(args.keys));
  console.log(`\n## exact\n`);
  console.log(
    `${r.tasks} tasks, ${r.keys} keys, limit ${EXACT_LIMIT}: ${r.samples} samples, max started per key ${r.maxStarted};` +
      ` ${r.seconds.toFixed(1)} s, ${
        r.tasksPerSec.toFixed(0)
      } tasks/s; ${r.recovered} tasks recovered` +
      ` (stalled), ${r.rerun} handler runs of a later attempt; every task completed once;` +
      ` one sample every ${(r.seconds * 1000 / r.samples).toFixed(1)} ms;` +
      ` before the kill ${r.killedAt.completed} tasks in ${r.killedAt.seconds.toFixed(1)} s` +
      ` (${(r.killedAt.completed / r.killedAt.seconds).toFixed(0)} tasks/s)`,
  );
}
if (which.includes("cost")) {
  const rounds = await cost(reps, args.before!, Number(args.backlog));
  console.log(`\n## cost when unused (before = ${args.before})\n`);
  console.log(
    "| round | before tasks/s | now tasks/s | ratio | before p50 ms | now p50 ms | Δ p50 ms |",
  );
  console.log("|---:|---:|---:|---:|---:|---:|---:|");
  rounds.forEach((r, i) =>
    console.log(
      `| ${i + 1} | ${r.before.tasksPerSec.toFixed(0)} | ${r.now.tasksPerSec.toFixed(0)} | ${
        (r.now.tasksPerSec / r.before.tasksPerSec).toFixed(3)
      } | ${r.before.p50.toFixed(1)} | ${r.now.p50.toFixed(1)} | ${
        (r.now.p50 - r.before.p50).toFixed(1)
      } |`,
    )
  );
  console.log(
    `\nthroughput ratio now/before: median ${
      spread(rounds.map((r) => r.now.tasksPerSec / r.before.tasksPerSec))
    }` +
      `; pickup p50 ratio: median ${spread(rounds.map((r) => r.now.p50 / r.before.p50))}`,
  );
}
if (which.includes("limited")) {
  const rounds = await limited(reps);
  console.log(`\n## limited (3 per key, 50 keys) against unlimited\n`);
  rounds.forEach((r, i) =>
    console.log(
      `round ${i + 1}: ${r.free.toFixed(0)} tasks/s unlimited, ${r.limited.toFixed(0)} limited`,
    )
  );
  console.log(
    `tasks/s ratio limited/unlimited: median ${spread(rounds.map((r) => r.limited / r.free))}`,
  );
}
console.log(`\nload average at end: ${await load()}`);
