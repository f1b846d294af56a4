/**
 * The CPU time one database backend spends per task on the SQL of a task's path, for two schema
 * trees side by side, so a change to the hot-path SQL can be held to a few per cent on a machine
 * other programs keep busy (where rates vary ±30 % between runs of the same code).
 *
 *   deno run -A bench/sql_cpu.ts --schemas OLD_DIR,NEW_DIR [--rounds 8] [--runs 600]
 *
 * One throw-away server, one database per tree (`applySchemaFiles`), one connection to each. A
 * round, in each database in turn (the order alternating between rounds): start `--runs` runs of
 * a single-step flow and of a three-step chain, then drive them as a busy worker would, one
 * `complete_and_claim` per batch of 10 (the previous batch's completions carried with the next
 * read), until every run has completed. The figure is that backend's time on a CPU
 * (`/proc/<pid>/schedstat`, in nanoseconds), divided by the tasks: time spent waiting for a core
 * does not count. Prints each tree's median per round, and the median and range of new ÷ old
 * over the rounds (each round pairs the two trees' figures of the same minute).
 *
 * @module
 */
import postgres from "postgres";
import { parseArgs } from "node:util";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applySchemaFiles } from "../local/db_push.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    schemas: { type: "string" },
    rounds: { type: "string", default: "8" },
    runs: { type: "string", default: "600" },
  },
});
if (!args.schemas || args.schemas.split(",").length !== 2) {
  console.error(
    "usage: deno run -A bench/sql_cpu.ts --schemas OLD_DIR,NEW_DIR [--rounds N] [--runs N]",
  );
  Deno.exit(2);
}
const TREES = args.schemas.split(",");
const ROUNDS = Number(args.rounds);
const RUNS = Number(args.runs);
const BATCH = 10;

interface Scenario {
  name: string;
  flow: string;
  steps: { slug: string; deps: string[] }[];
}

const SCENARIOS: Scenario[] = [
  { name: "single", flow: "cpu_single", steps: [{ slug: "work", deps: [] }] },
  {
    name: "chain",
    flow: "cpu_chain",
    steps: [{ slug: "a", deps: [] }, { slug: "b", deps: ["a"] }, { slug: "c", deps: ["b"] }],
  },
];

/** Nanoseconds the process has spent on a CPU. */
async function cpuNs(pid: number): Promise<number> {
  return Number((await Deno.readTextFile(`/proc/${pid}/schedstat`)).split(" ")[0]);
}

async function prepare(sql: postgres.Sql): Promise<number> {
  for (const s of SCENARIOS) {
    await sql`select pgflow.create_flow(${s.flow}, 3, 1, 60, 'flow')`;
    for (const step of s.steps) {
      await sql`select pgflow.add_step(flow_slug => ${s.flow}, step_slug => ${step.slug},
                                       deps_slugs => ${step.deps}::text[])`;
    }
    const pairs = s.steps.map((step) => [s.flow, step.slug]);
    await sql`select pgflow.register_worker(${crypto.randomUUID()}::uuid, ${s.flow}, 'cpu',
                                            ${JSON.stringify(pairs)}::text::jsonb)`;
  }
  const [{ pid }] = await sql`select pg_backend_pid() as pid`;
  return pid;
}

interface Claimed {
  run_id: string;
  step_slug: string;
  task_index: number;
  attempt: number;
}

/** Starts `runs` runs and drives them to completion; returns the tasks run. */
async function drive(sql: postgres.Sql, s: Scenario, runs: number): Promise<number> {
  const [{ worker }] = await sql`select worker_id::text as worker from pgflow.workers
                                 where queue_name = ${s.flow} order by started_at desc limit 1`;
  await sql`select count(pgflow.start_flow(${s.flow}, '{"n": 1}'::jsonb))
            from generate_series(1, ${runs}::int)`;
  let carried: Claimed[] = [];
  let tasks = 0;
  for (let idle = 0; idle < 3;) {
    const rows = await sql<Claimed[]>`
      select run_id, step_slug, task_index, attempt from pgflow.complete_and_claim(
        ${carried.map((c) => c.run_id)}::uuid[], ${carried.map((c) => c.step_slug)}::text[],
        ${carried.map((c) => c.task_index)}::int[],
        ${carried.map(() => '{"ok": true}')}::text[]::jsonb[],
        ${carried.map((c) => c.attempt)}::int[], ${s.flow}, ${worker}::uuid, 30, ${BATCH})
      where disposition = 'claimed'`;
    tasks += carried.length;
    carried = rows.map((r) => ({ ...r }));
    idle = carried.length === 0 ? idle + 1 : 0;
  }
  const [{ open }] = await sql`select count(*)::int as open from pgflow.runs
                               where flow_slug = ${s.flow} and status <> 'completed'`;
  if (open !== 0) throw new Error(`${open} runs of ${s.flow} did not complete`);
  return tasks;
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

const server = await startLocalPostgres();
try {
  const admin = postgres(server.url, { max: 1, onnotice: () => {} });
  const dbs: { sql: postgres.Sql; pid: number }[] = [];
  for (const [i, tree] of TREES.entries()) {
    await admin.unsafe(`create database cpu_${i}`);
    const sql = postgres(server.url.replace(/\/postgres$/, `/cpu_${i}`), {
      max: 1,
      onnotice: () => {},
    });
    await installPgmq(sql);
    await applySchemaFiles(sql, tree);
    dbs.push({ sql, pid: await prepare(sql) });
  }
  await admin.end();
  // Warm-up: plans cached in both sessions.
  for (const db of dbs) for (const s of SCENARIOS) await drive(db.sql, s, 50);

  const perTask = new Map<string, number[]>();
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? [0, 1] : [1, 0];
    for (const s of SCENARIOS) {
      for (const i of order) {
        const { sql, pid } = dbs[i];
        const before = await cpuNs(pid);
        const tasks = await drive(sql, s, RUNS);
        const us = (await cpuNs(pid) - before) / 1000 / tasks;
        const key = `${s.name}|${i}`;
        perTask.set(key, [...(perTask.get(key) ?? []), us]);
      }
      const [old, now] = [0, 1].map((i) => perTask.get(`${s.name}|${i}`)!.at(-1)!);
      console.error(
        `round ${round + 1} ${s.name}: old ${old.toFixed(1)} µs, new ${now.toFixed(1)} µs per task`,
      );
    }
  }
  console.log(
    `\n| scenario | old µs/task | new µs/task | new ÷ old, median (range over ${ROUNDS} rounds) |`,
  );
  console.log("|---|---:|---:|---:|");
  for (const s of SCENARIOS) {
    const old = perTask.get(`${s.name}|0`)!;
    const now = perTask.get(`${s.name}|1`)!;
    const ratios = old.map((o, i) => now[i] / o);
    console.log(
      `| ${s.name} | ${median(old).toFixed(1)} (${Math.min(...old).toFixed(1)}–${
        Math.max(...old).toFixed(1)
      }) | ${median(now).toFixed(1)} (${Math.min(...now).toFixed(1)}–${
        Math.max(...now).toFixed(1)
      }) | ${median(ratios).toFixed(3)} (${Math.min(...ratios).toFixed(3)}–${
        Math.max(...ratios).toFixed(3)
      }) |`,
    );
  }
  for (const db of dbs) await db.sql.end();
} finally {
  await server.destroy();
}
