/**
 * A worker's cold start: a new Deno process (warm module cache; the flow compiled already) from
 * its spawn to its first claimed task, and where the time goes. Each start queues one run, spawns
 * `cold_start_worker.ts` and reads its marks (each taken in the child with performance.now()):
 * the process's boot (spawn → the script's first line), the module's load, the connection, the
 * engine-schema check, the compile check, the support set with the registration, the wake-ups
 * (LISTEN), and the first read and claim to the handler. Then it counts the worker's server
 * connections (pg_stat_activity, by backend start after the spawn; the LISTEN one by its
 * application_name): idle after the first task, and after a drain of `--drain` tasks. Prints
 * markdown (medians, lowest–highest); nothing is asserted. One process at a time, on a durable
 * throw-away server (or `DATABASE_URL`).
 *
 * With `--before DIR` (another tree, e.g. `main` unpacked with `git archive`), every round starts
 * a worker of each tree, in an order that alternates by round, with this tree's child script
 * (importing DIR's mod.ts under DIR's deno.json): before and after in one run, interleaved.
 *
 * With `--supabase-env`, the worker's environment has `SUPABASE_URL` and a service key (never
 * used to connect), as on Supabase, where a worker prepares `ctx.supabase` at startup.
 *
 * `deno run -A bench/cold_start.ts [--rounds 10] [--drain 2000] [--before DIR] [--supabase-env]
 * [--write]`
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { Flow } from "../mod.ts";
import { ensureFlowCompiled } from "../tools.ts";
import { median } from "./stats.ts";
import { writeResultsBlock } from "./results_block.ts";
import { sleep } from "./clock.ts";

const arg = (name: string): string | undefined => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Deno.args[i + 1] : undefined;
};
const ROUNDS = Number(arg("--rounds") ?? 10);
const DRAIN = Number(arg("--drain") ?? 2_000);
const BEFORE = arg("--before");
const SLUG = "bench_cold";
const SUPABASE_ENV = Deno.args.includes("--supabase-env");
const WRITE = Deno.args.includes("--write");
const out: string[] = [];
const print = (line = "") => {
  console.log(line);
  out.push(line);
};

/** The phases, each from the previous mark present to its own (a tree may not log every one). */
const PHASES: readonly [string, string][] = [
  ["spawn", "process boot (spawn → the script's first line)"],
  ["module", "module load (`import` of mod.ts and its dependencies)"],
  ["database connection", "connect (the pool's first connection, its type fetch, its kind)"],
  ["engine schema", "engine-schema check"],
  ["flow compiled", "compile check (the definition exists: verified)"],
  ["worker registered", "support set and registration"],
  ["worker started", "wake-ups (LISTEN) and the rest of the startup"],
  ["first task", "first read and claim → handler"],
];

/** A tree whose worker is measured. */
interface Variant {
  readonly name: string;
  /** Its deno.json (import map, lock) and mod.ts; this tree's when absent. */
  readonly root?: string;
  readonly phases: Map<string, number[]>;
  readonly totals: number[];
  readonly idle: { pool: number; listen: number }[];
  busy?: { pool: number; listen: number };
}
const variant = (name: string, root?: string): Variant => ({
  name,
  root,
  phases: new Map(PHASES.map(([k]) => [k, []])),
  totals: [],
  idle: [],
});
const variants: Variant[] = BEFORE === undefined
  ? [variant("this tree")]
  : [variant("before", BEFORE.replace(/\/$/, "")), variant("after")];

const db = await openPgflowDatabase({ durable: true });
// One connection, named, opened before any worker: the count below leaves it out.
const sql = postgres(db.url, {
  max: 1,
  onnotice: () => {},
  connection: { application_name: "bench cold start" },
});

/** The worker's server connections: client backends started since `since` (epoch ms). */
async function connectionsSince(since: number): Promise<{ pool: number; listen: number }> {
  const [row] = await sql<{ pool: number; listen: number }[]>`
    select count(*) filter (where application_name <> 'pgflow worker')::int as pool,
           count(*) filter (where application_name = 'pgflow worker')::int as listen
    from pg_stat_activity
    where backend_type = 'client backend' and pid <> pg_backend_pid()
      and backend_start >= to_timestamp(${since / 1000})
      and application_name <> 'bench cold start'`;
  return row;
}

function child(v: Variant): Deno.ChildProcess {
  const script = new URL("./cold_start_worker.ts", import.meta.url).pathname;
  const config = v.root === undefined ? [] : ["--config", `${v.root}/deno.json`];
  const mod = v.root === undefined ? [] : [new URL(`file://${v.root}/mod.ts`).href];
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", ...config, script, db.url, SLUG, ...mod],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
    env: SUPABASE_ENV
      ? { SUPABASE_URL: "http://127.0.0.1:9", SUPABASE_SERVICE_ROLE_KEY: "bench-not-a-key" }
      : {},
  }).spawn();
}

/** One cold start of `v`'s worker; `record` false for the warm-up; `drain` after the first task. */
async function start(v: Variant, record: boolean, drain: boolean): Promise<void> {
  await sql`select pgflow.start_flow(${SLUG}, '{}')`;
  const spawned = Date.now();
  const process = child(v);
  const reader = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`the ${v.name} worker process ended before its first task`);
    text += value;
  }
  const { marks } = JSON.parse(text.slice(0, text.indexOf("\n"))) as {
    marks: [string, number][];
  };
  // An event logged again later (a debug line per batch) counts at its first time.
  const at = new Map<string, number>();
  for (const [name, t] of marks) if (!at.has(name)) at.set(name, t);
  if (record) {
    let previous = spawned;
    for (const [key] of PHASES) {
      const t = key === "spawn" ? at.get("script") : at.get(key);
      if (t === undefined) continue; // not logged by this tree: its time is in the next phase
      v.phases.get(key)!.push(t - previous);
      previous = t;
    }
    v.totals.push(at.get("first task")! - spawned);
    v.idle.push(await connectionsSince(spawned));
    if (drain) {
      // The same process under load: a backlog drained, then its connections counted.
      await sql`select pgflow.start_flows(${SLUG},
                  (select jsonb_agg('{}'::jsonb) from generate_series(1, ${DRAIN}::int)))`;
      for (;;) {
        const [{ left }] = await sql`select count(*)::int as left from pgflow.runs
                                     where flow_slug = ${SLUG} and status = 'started'`;
        if (left === 0) break;
        await sleep(100);
      }
      v.busy = await connectionsSince(spawned);
    }
  }
  const writer = process.stdin.getWriter();
  await writer.write(new TextEncoder().encode("stop\n"));
  await writer.close();
  await reader.cancel();
  await process.status;
}

const spread = (xs: readonly number[]) =>
  `${Math.min(...xs).toFixed(0)}–${Math.max(...xs).toFixed(0)}`;

try {
  await ensureFlowCompiled(
    sql,
    new Flow<unknown>({ slug: SLUG }).step({ slug: "work" }, () => null),
  );
  // A first process of each tree fills Deno's module cache (and the OS's file cache).
  for (const v of variants) await start(v, false, false);
  for (let round = 0; round < ROUNDS; round++) {
    const order = round % 2 === 0 ? variants : [...variants].reverse();
    for (const v of order) await start(v, true, round === ROUNDS - 1 && DRAIN > 0);
  }
  const env = SUPABASE_ENV ? ", Supabase's environment" : "";
  print(
    `| cold start of a worker process (${ROUNDS} starts per tree${
      variants.length > 1 ? ", interleaved" : ""
    }, warm cache${env}), ms | ${
      variants.map((v) => `${v.name} p50 | lowest–highest`).join(" | ")
    } |`,
  );
  print(`|---|${variants.map(() => "---:|---:").join("|")}|`);
  for (const [key, label] of PHASES) {
    const cells = variants.map((v) => {
      const xs = v.phases.get(key)!;
      return xs.length === 0 ? "– | –" : `${median(xs).toFixed(0)} | ${spread(xs)}`;
    });
    print(`| ${label} | ${cells.join(" | ")} |`);
  }
  print(
    `| **spawn → first claimed task** | ${
      variants.map((v) => `**${median(v.totals).toFixed(0)}** | ${spread(v.totals)}`).join(" | ")
    } |`,
  );
  print();
  print(
    `| server connections of one worker at its defaults (pool + LISTEN) | ${
      variants.map((v) => v.name).join(" | ")
    } |`,
  );
  print(`|---|${variants.map(() => "---:").join("|")}|`);
  const count = (c: { pool: number; listen: number }) =>
    `${c.pool + c.listen} (${c.pool} + ${c.listen})`;
  const idleCell = (v: Variant) => {
    const total = v.idle.map((c) => c.pool + c.listen);
    const at = v.idle.findIndex((c) => c.pool + c.listen === median(total));
    return count(v.idle[at]);
  };
  print(`| after its first task (idle; median) | ${variants.map(idleCell).join(" | ")} |`);
  if (DRAIN > 0) {
    print(
      `| after draining ${DRAIN} tasks | ${
        variants.map((v) => v.busy === undefined ? "–" : count(v.busy)).join(" | ")
      } |`,
    );
  }
  const total = median(variants.at(-1)!.totals);
  print();
  print("| target | measured | met |");
  print("|---|---:|---:|");
  print(
    `| cold start to the first claimed task ≤ 300 ms | ${total.toFixed(0)} ms | ${
      total <= 300 ? "yes" : "**no**"
    } |`,
  );
  if (WRITE) {
    writeResultsBlock(
      SUPABASE_ENV ? "cold-supabase" : "cold",
      `deno run -A bench/cold_start.ts ${
        Deno.args.map((a) => a === BEFORE ? "<main's tree>" : a).join(" ")
      }`,
      out,
    );
  }
} finally {
  await sql.end({ timeout: 5 });
  await db.close();
}
