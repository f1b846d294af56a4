/** The benchmark's figures, as a terminal table and as bench/results.md. */
import type { ClaimCell } from "./claim_cost.ts";
import { BATCHES, PAIRS } from "./claim_cost.ts";
import { type ChainResult, type EngineResult, PLAIN_CHAIN } from "./engine.ts";
import { combine, type Rounds, type Spread, spreadCell } from "./repeat.ts";
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
  single: Rounds<EngineResult>;
  /** One flow's runs on a queue whose four workers serve the same or different pairs. */
  mixed: Rounds<EngineResult>;
  floor: Rounds<EngineResult>;
  peer: Rounds<EngineResult>;
  chain: Rounds<ChainResult>;
  scale: Rounds<ScalePoint>;
  claim: ClaimCell[];
  memory?: MemoryResult;
  seconds?: number;
}

type Rows = string[][];
type Numbers = object;
type Combined<T> = { [K in keyof T]: T[K] extends number ? Spread : T[K] };

function combined<T extends Numbers>(rounds: Rounds<T>): [string, Combined<T>][] {
  return rounds.entries().map(([name, results]) => [name, combine(results)]);
}

function find<T extends Numbers>(rounds: Rounds<T>, name: string): Combined<T> | undefined {
  return combined(rounds).find(([n]) => n === name)?.[1];
}

function first<T extends Numbers>(rounds: Rounds<T>): Combined<T> | undefined {
  return combined(rounds)[0]?.[1];
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

function comparisonRows(f: Figures): Rows {
  const base = plain(f);
  const rows: Rows = [[
    "floor and peer",
    "tasks/s",
    "pickup p50 ms",
    "p95 ms",
    "it ÷ engine (tasks/s)",
  ]];
  for (const r of [first(f.floor), first(f.peer)]) {
    if (r === undefined) continue;
    rows.push([
      r.name,
      cell(r.tasksPerSec, 0),
      cell(r.p50),
      cell(r.p95),
      ratio(base ? r.tasksPerSec.median / base.tasksPerSec.median : NaN),
    ]);
  }
  return rows;
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
  return [
    ["scale-out (single-step no-op)", "tasks/s", "× 1 worker", "pickup p50 ms", "p95 ms"],
    ...combined(f.scale).map(([name, r]) => {
      const one = combined(f.scale).find(([, p]) =>
        p.layout === r.layout && p.workers.median === 1
      );
      return [
        name,
        cell(r.tasksPerSec, 0),
        ratio(one ? r.tasksPerSec.median / one[1].tasksPerSec.median : NaN),
        cell(r.p50),
        cell(r.p95),
      ];
    }),
  ];
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

function targets(f: Figures): Target[] {
  const base = plain(f);
  const shared100 = find(f.single, "shared queue, 100 flows");
  const pooled = combined(f.single).find(([n]) => n.includes("PgBouncer"))?.[1];
  const peer = first(f.peer);
  const floor = first(f.floor);
  const chain = find(f.chain, PLAIN_CHAIN);
  const peerChain = combined(f.chain).find(([n]) => n.startsWith("graphile-worker"))?.[1];
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
  if (base && floor) {
    const r = floor.tasksPerSec.median / base.tasksPerSec.median;
    out.push({
      name: "engine ≤ 3× the raw PGMQ loop (raw ÷ engine tasks/s)",
      measured: ratio(r),
      met: r <= 3,
    });
  }
  if (base && peer) {
    const r = base.tasksPerSec.median / peer.tasksPerSec.median;
    out.push({
      name: "single-step: ahead of graphile-worker (engine ÷ peer tasks/s)",
      measured: ratio(r),
      met: r > 1,
    });
    const p = base.p50.median / peer.p50.median;
    out.push({
      name: "pickup: engine ÷ graphile-worker p50 (≤ 1.0×)",
      measured: `${ratio(p)} (${fixed(base.p50.median)} vs ${fixed(peer.p50.median)} ms)`,
      met: p <= 1,
    });
  }
  if (chain && peerChain) {
    const r = chain.runsPerSec.median / peerChain.runsPerSec.median;
    out.push({
      name: "3-step chain: ahead of graphile-worker (engine ÷ peer runs/s)",
      measured: ratio(r),
      met: r > 1,
    });
    const limit = Math.min(3 * peerChain.runP50.median, 46);
    out.push({
      name: "unloaded chain p50 ≤ 3 × graphile-worker's chained jobs and < 46 ms",
      measured: `${fixed(chain.runP50.median)} ms (limit ${fixed(limit)} ms)`,
      met: chain.runP50.median <= limit,
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

function targetRows(f: Figures): Rows {
  return [
    ["target", "measured", "met"],
    ...targets(f).map((t) => [t.name, t.measured, t.met ? "yes" : "**no**"]),
  ];
}

function settings(f: Figures): string {
  const o = f.options;
  return [
    `${o.repeat} round${
      o.repeat === 1 ? "" : "s"
    }: every throughput and latency scenario runs once per round, in turn; each cell is the median across rounds with the spread (lowest–highest) in brackets`,
    `${o.tasks} tasks per throughput scenario (a backlog sent in one transaction, drained; tasks/s over first claim → last completion)`,
    `${o.latencyTasks} runs started one at a time at ${o.rate}/s for pickup latency (sending transaction's now() → handler's first line, clocks aligned by a measured offset)`,
    `every worker: batchSize 10, maxConcurrent 10, pollIntervalMs ${o.pollIntervalMs}, maxPollSeconds ${o.maxPollSeconds}, default pool (4 connections; prepared statements on this direct connection)`,
    `chains: ${o.chainRuns} three-step runs drained (runs/s), then ${o.chainPaced} runs started one at a time at ${o.chainRate}/s (unloaded): run latency from start_flow's now() to the now() of the transaction completing its last step; graphile-worker: from job a's run_at to the end of job c's function, each job adding the next`,
    `scale-out: ${
      o.scaleWorkers.join(", ")
    } workers, ${o.scaleTasks} tasks per point after a warm-up of ${WARM_UP_PER_WORKER} per worker, pickup from ${
      Math.min(100, o.latencyTasks)
    } runs at ${o.rate}/s; every worker its own pool, in one process; graphile-worker as many runners (concurrency 10 each), same warm-up, from the first job started to the last completed`,
    `mixed workers: one queue, four workers; the measured flow's backlog and paced runs, every worker serving it ("identical"), or one serving it and three serving one other flow each ("1 serving + 3 not")`,
    `memory: ${o.memoryTasks} tasks in a worker process of its own`,
  ].map((l) => `- ${l}`).join("\n");
}

function sections(f: Figures): Rows[] {
  const out: Rows[] = [];
  if (f.single.entries().length > 0) out.push(singleRows(f));
  if (f.mixed.entries().length > 0) out.push(mixedRows(f));
  if (first(f.floor) || first(f.peer)) out.push(comparisonRows(f));
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
