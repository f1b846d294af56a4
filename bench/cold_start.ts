/**
 * A worker's cold start: a new Deno process (warm module cache; the flow compiled already) from
 * its spawn to its first claimed task, and where the time goes. Each round queues one run, spawns
 * `cold_start_worker.ts` and reads its marks: the process's boot (spawn → the script's first
 * line), the module's load, the connection, the engine-schema check, the compile check, the
 * support set with the registration and the wake-ups, and the first read to the handler. Then it
 * counts the worker's server connections (pg_stat_activity, by backend start after the spawn):
 * idle after the first task, and after a drain of `--drain` tasks. Prints markdown; nothing is
 * asserted. One process at a time, on a durable throw-away server (or `DATABASE_URL`).
 *
 * With `--supabase-env`, the worker's environment has `SUPABASE_URL` and a service key (never
 * used to connect), as on Supabase, where a worker prepares `ctx.supabase` at startup.
 *
 * `deno run -A bench/cold_start.ts [--rounds 7] [--drain 2000] [--supabase-env] [--write]`
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

const arg = (name: string, fallback: number): number => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Number(Deno.args[i + 1]) : fallback;
};
const ROUNDS = arg("--rounds", 7);
const DRAIN = arg("--drain", 2_000);
const SLUG = "bench_cold";
const SUPABASE_ENV = Deno.args.includes("--supabase-env");
const WRITE = Deno.args.includes("--write");
const out: string[] = [];
const print = (line = "") => {
  console.log(line);
  out.push(line);
};

/** The phases, each from the previous mark to its own. */
const PHASES: readonly [string, string][] = [
  ["spawn", "process boot (spawn → the script's first line)"],
  ["module", "module load (`import` of mod.ts and its dependencies)"],
  ["database connection", "first connection (the pool's, with its type fetch)"],
  ["engine schema", "engine-schema check"],
  ["flow compiled", "compile check (the definition exists: verified)"],
  ["worker started", "support set, registration, wake-ups (LISTEN)"],
  ["first task", "first read and claim → handler"],
];

const db = await openPgflowDatabase({ durable: true });
// One connection, named, opened before any worker: the count below leaves it out.
const sql = postgres(db.url, {
  max: 1,
  onnotice: () => {},
  connection: { application_name: "bench cold start" },
});
const phases = new Map<string, number[]>(PHASES.map(([k]) => [k, []]));
const totals: number[] = [];
const idleConnections: number[] = [];
const busyConnections: number[] = [];

/** The worker's server connections: client backends started since `since` (epoch ms). */
async function connectionsSince(since: number): Promise<number> {
  const [{ n }] = await sql`
    select count(*)::int as n from pg_stat_activity
    where backend_type = 'client backend' and pid <> pg_backend_pid()
      and backend_start >= to_timestamp(${since / 1000})
      and application_name <> 'bench cold start'`;
  return n;
}

try {
  await ensureFlowCompiled(
    sql,
    new Flow<unknown>({ slug: SLUG }).step({ slug: "work" }, () => null),
  );
  const child = (extra: string[] = []) =>
    new Deno.Command(Deno.execPath(), {
      args: [
        "run",
        "-A",
        new URL("./cold_start_worker.ts", import.meta.url).pathname,
        db.url,
        SLUG,
        ...extra,
      ],
      stdin: "piped",
      stdout: "piped",
      stderr: "inherit",
      env: SUPABASE_ENV
        ? { SUPABASE_URL: "http://127.0.0.1:9", SUPABASE_SERVICE_ROLE_KEY: "bench-not-a-key" }
        : {},
    });
  // A first process fills Deno's module cache (and the OS's file cache): the rounds are warm.
  for (let round = -1; round < ROUNDS; round++) {
    await sql`select pgflow.start_flow(${SLUG}, '{}')`;
    const spawned = Date.now();
    const process = child().spawn();
    const reader = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    while (!text.includes("\n")) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the worker process ended before its first task");
      text += value;
    }
    const { marks } = JSON.parse(text.slice(0, text.indexOf("\n"))) as {
      marks: [string, number][];
    };
    const at = new Map(marks);
    if (round >= 0) {
      let previous = spawned;
      for (const [key] of PHASES) {
        const t = key === "spawn" ? at.get("script")! : at.get(key);
        if (t === undefined) throw new Error(`the worker did not mark "${key}"`);
        phases.get(key)!.push(t - previous);
        previous = t;
      }
      totals.push(at.get("first task")! - spawned);
      idleConnections.push(await connectionsSince(spawned));
      if (round === ROUNDS - 1 && DRAIN > 0) {
        // The same process under load: a backlog drained, then its connections counted.
        await sql`select pgflow.start_flows(${SLUG},
                    (select jsonb_agg('{}'::jsonb) from generate_series(1, ${DRAIN}::int)))`;
        for (;;) {
          const [{ left }] = await sql`select count(*)::int as left from pgflow.runs
                                       where flow_slug = ${SLUG} and status = 'started'`;
          if (left === 0) break;
          await sleep(100);
        }
        busyConnections.push(await connectionsSince(spawned));
      }
    }
    const writer = process.stdin.getWriter();
    await writer.write(new TextEncoder().encode("stop\n"));
    await writer.close();
    await reader.cancel();
    await process.status;
  }
  print(
    `| cold start of a worker process (${ROUNDS} rounds, warm cache${
      SUPABASE_ENV ? ", Supabase's environment" : ""
    }) | ms p50 | lowest–highest |`,
  );
  print("|---|---:|---:|");
  for (const [key, label] of PHASES) {
    const xs = phases.get(key)!;
    print(
      `| ${label} | ${median(xs).toFixed(0)} | ${Math.min(...xs).toFixed(0)}–${
        Math.max(...xs).toFixed(0)
      } |`,
    );
  }
  print(
    `| **spawn → first claimed task** | **${median(totals).toFixed(0)}** | ${
      Math.min(...totals).toFixed(0)
    }–${Math.max(...totals).toFixed(0)} |`,
  );
  print();
  print("| server connections of one worker at its defaults | count |");
  print("|---|---:|");
  print(`| after its first task (idle) | ${median(idleConnections)} |`);
  if (busyConnections.length > 0) {
    print(`| after draining ${DRAIN} tasks | ${busyConnections[0]} |`);
  }
  const total = median(totals);
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
      `deno run -A bench/cold_start.ts ${Deno.args.join(" ")}`,
      out,
    );
  }
} finally {
  await sql.end({ timeout: 5 });
  await db.close();
}
