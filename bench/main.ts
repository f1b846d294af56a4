/**
 * `deno task bench [--quick] [--tasks N] ... [--help]`
 *
 * Runs every benchmark on one database (DATABASE_URL, or a throw-away local Postgres started
 * here), prints the tables and writes them, with the machine, versions and settings, to
 * bench/results.md. Figures and ratios come from this one run; nothing here asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { findPgBouncer, startPgBouncer } from "../local/pgbouncer.ts";
import { PAIRS } from "./claim_cost.ts";
import { clockOffsetMs } from "./clock.ts";
import {
  chainScenarios,
  type EngineResult,
  type EngineSettings,
  singleStepScenario,
} from "./engine.ts";
import { mixedWorkerScenarios } from "./mixed_workers.ts";
import { Rounds } from "./repeat.ts";
import { scaleOutScenarios } from "./scale_out.ts";
import { plainFlow, privateFlow, sharedFlows } from "./flows.ts";
import { measureClaimCost } from "./claim_cost.ts";
import { measureMemory } from "./memory.ts";
import { type BenchOptions, parseOptions } from "./options.ts";
import { type CellLoad, CELLS, Rates, runCell } from "./cells.ts";
import { createTemplate, type Template } from "./databases.ts";
import { plainChain } from "./flows.ts";
import { FLOOR_QUEUE } from "./pgmq_floor.ts";
import { type Figures, renderMarkdown, renderText } from "./report.ts";

const PGMQ_SOURCES = {
  compatible: "the project's PGMQ 1.5.1-compatible SQL (local/pgmq.sql)",
  extension: "the pgmq extension",
  existing: "a pgmq schema already present",
} as const;

const RESULTS = new URL("./results.md", import.meta.url).pathname;

async function machine(): Promise<string> {
  let cpu = "unknown CPU";
  try {
    const info = await Deno.readTextFile("/proc/cpuinfo");
    cpu = /model name\s*:\s*(.+)/.exec(info)?.[1] ?? cpu;
  } catch { /* not Linux */ }
  const memGiB = (Deno.systemMemoryInfo().total / 2 ** 30).toFixed(0);
  return `${Deno.build.os}/${Deno.build.arch}, ${navigator.hardwareConcurrency} cores (${cpu}), ${memGiB} GiB`;
}

async function run(o: BenchOptions): Promise<Figures> {
  const started = performance.now();
  const db = await openPgflowDatabase({ durable: !o.fast });
  const sql = postgres(db.url, { max: 2, prepare: false, onnotice: () => {} });
  let template: Template | undefined;
  const log = (text: string) =>
    console.error(`[${((performance.now() - started) / 1000).toFixed(0).padStart(4)}s] ${text}`);
  try {
    const [{ version, fsync, synchronous_commit }] = await sql<
      { version: string; fsync: string; synchronous_commit: string }[]
    >`select version(), current_setting('fsync') as fsync,
             current_setting('synchronous_commit') as synchronous_commit`;
    const s: EngineSettings = {
      url: db.url,
      sql,
      offsetMs: await clockOffsetMs(sql),
      tasks: o.tasks,
      latencyTasks: o.latencyTasks,
      rate: o.rate,
      maxConcurrent: 10,
      batchSize: 10,
      pollIntervalMs: o.pollIntervalMs,
      maxPollSeconds: o.maxPollSeconds,
    };
    const f: Figures = {
      label: o.label,
      date: new Date().toISOString(),
      machine: await machine(),
      deno: Deno.version.deno,
      postgres: version.split(",")[0],
      durability: `fsync=${fsync}, synchronous_commit=${synchronous_commit}`,
      pgmq: `${PGMQ_SOURCES[db.pgmq]} (${db.local ? "throw-away local server" : "DATABASE_URL"})`,
      options: o,
      cells: new Rounds(),
      single: new Rounds(),
      mixed: new Rounds(),
      chain: new Rounds(),
      scale: new Rounds(),
      claim: [],
    };
    // Every repeated scenario, in the order a round runs them; each appends to its own list.
    const scenarios: [() => Promise<void>, string][] = [];
    const add = <T>(list: Rounds<T>, name: string, fn: () => Promise<T>) =>
      scenarios.push([async () => list.add(name, await fn()), name]);
    if (o.only.has("headline")) {
      log("preparing the template database of the headline cells");
      template = await createTemplate(db.url, [plainFlow, plainChain], [FLOOR_QUEUE], db.local);
      const load: CellLoad = {
        drainSeconds: o.drainSeconds,
        chainPaced: o.chainPaced,
        chainRate: o.chainRate,
        dbosPollMs: o.dbosPollMs,
      };
      const rates = new Rates();
      for (const key of o.cells) {
        add(f.cells, CELLS[key], () => runCell(s, template!, key, load, rates, log));
      }
    }
    if (o.only.has("single")) {
      add(
        f.single,
        "plain flow queue",
        () => singleStepScenario(s, "plain flow queue", { target: plainFlow }, [plainFlow.slug]),
      );
      add(
        f.single,
        "private step queue",
        () =>
          singleStepScenario(s, "private step queue", { target: privateFlow, stepSlug: "work" }, [
            privateFlow.flow.slug,
          ]),
      );
      for (const [name, fn] of pooledScenario(s, db.local)) add(f.single, name, fn);
      for (const n of [1, 10, 100]) {
        const { queue, flows } = sharedFlows(n);
        const name = `shared queue, ${n} flow${n === 1 ? "" : "s"}`;
        add(f.single, name, () =>
          singleStepScenario(
            s,
            name,
            { target: flows, queueName: queue },
            flows.map((r) => r.flow.slug),
          ));
      }
    }
    if (o.only.has("mixed")) {
      for (const [name, fn] of mixedWorkerScenarios(s)) add(f.mixed, name, fn);
    }
    if (o.only.has("chain")) {
      const load = { runs: o.chainRuns, paced: o.chainPaced, rate: o.chainRate };
      for (const [name, fn] of chainScenarios(s, load)) add(f.chain, name, fn);
    }
    if (o.only.has("scale")) {
      const load = { counts: o.scaleWorkers, seconds: o.scaleSeconds, separate: o.scaleSeparate };
      for (const [name, fn] of scaleOutScenarios(s, load)) add(f.scale, name, fn);
    }
    for (let round = 1; round <= o.repeat; round++) {
      for (const [scenario, name] of scenarios) {
        log(`round ${round}/${o.repeat}: ${name}`);
        await scenario();
      }
    }
    if (o.only.has("claim")) {
      log(`claim cost (${PAIRS.join(", ")} pairs)`);
      f.claim = await measureClaimCost(db.url, o.claimScale);
    }
    if (o.only.has("memory")) {
      log(`memory after ${o.memoryTasks} tasks`);
      f.memory = await measureMemory(db.url, sql, o.memoryTasks, o.pollIntervalMs);
    }
    f.seconds = (performance.now() - started) / 1000;
    return f;
  } finally {
    await template?.drop().catch(() => {});
    await sql.end();
    await db.close();
  }
}

/**
 * The plain-flow scenario again, with the worker behind a throw-away PgBouncer in transaction
 * mode (the stand-in for Supavisor, port 6543): what the pooler costs. The producer stays direct.
 * Only on a server started here (PgBouncer logs in without a password) with PgBouncer installed.
 */
function pooledScenario(
  s: EngineSettings,
  local: boolean,
): [string, () => Promise<EngineResult>][] {
  const name = "plain flow queue, via PgBouncer (transaction mode)";
  if (!local || findPgBouncer() === undefined) {
    console.error(`[bench] skipping "${name}": needs a local server and PgBouncer installed`);
    return [];
  }
  return [[name, async () => {
    const bouncer = await startPgBouncer({ serverPort: Number(new URL(s.url).port) });
    try {
      const pooled = { ...s, url: bouncer.via(s.url) };
      return await singleStepScenario(pooled, name, { target: plainFlow }, [plainFlow.slug]);
    } finally {
      await bouncer.destroy();
    }
  }]];
}

/** The part of an existing results file kept across runs: the hand-written optimisation log. */
async function keptLog(path: string): Promise<string> {
  try {
    const text = await Deno.readTextFile(path);
    const at = text.indexOf("\n## Optimisation log");
    return at >= 0 ? text.slice(at + 1) : "";
  } catch {
    return "";
  }
}

/**
 * Each headline cell's database is dropped `with (force)` once the cell is done. A graphile-worker
 * runner can leave a node-postgres client connected after its stop resolves; the drop terminates
 * it (SQLSTATE 57P01), and node-postgres raises that on a client nobody listens to any more, which
 * would end the run. Only that error is let through, with a line saying so; any other uncaught
 * error still ends the run.
 */
function survivesDroppedCellConnections(log: (text: string) => void): void {
  globalThis.addEventListener("error", (event) => {
    const error = event.error as { code?: unknown; message?: unknown } | undefined;
    if (error?.code !== "57P01") return;
    event.preventDefault();
    log(`a connection to a dropped cell database was terminated (${String(error.message)})`);
  });
}

async function main() {
  survivesDroppedCellConnections((text) => console.error(text));
  const o = parseOptions(Deno.args, RESULTS);
  const f = await run(o);
  console.log(renderText(f));
  if (o.out !== undefined) {
    await Deno.writeTextFile(o.out, renderMarkdown(f) + "\n" + await keptLog(o.out));
    console.log(`\nwritten to ${o.out}`);
  }
}

if (import.meta.main) await main();
