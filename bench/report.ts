/** The benchmark's figures, as a terminal table and as bench/results.md. */
import type { ClaimCell } from "./claim_cost.ts";
import { BATCHES, PAIRS } from "./claim_cost.ts";
import type { ChainResult, EngineResult } from "./engine.ts";
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
  single: EngineResult[];
  chain: ChainResult[];
  claim: ClaimCell[];
  floor?: EngineResult;
  peer?: EngineResult;
  memory?: MemoryResult;
  seconds?: number;
}

type Rows = string[][];

function plain(f: Figures): EngineResult | undefined {
  return f.single.find((r) => r.name === "plain flow queue");
}

function singleRows(f: Figures): Rows {
  const base = plain(f);
  return [
    ["single-step no-op flow (1 worker)", "tasks", "tasks/s", "× plain", "pickup p50 ms", "p95 ms"],
    ...f.single.map((r) => [
      r.name,
      `${r.tasks}`,
      fixed(r.tasksPerSec, 0),
      ratio(base ? r.tasksPerSec / base.tasksPerSec : NaN),
      fixed(r.p50),
      fixed(r.p95),
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
  for (const r of [f.floor, f.peer]) {
    if (r === undefined) continue;
    rows.push([
      r.name,
      fixed(r.tasksPerSec, 0),
      fixed(r.p50),
      fixed(r.p95),
      ratio(base ? r.tasksPerSec / base.tasksPerSec : NaN),
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
      "run p50 ms",
      "run p95 ms",
    ],
    ...f.chain.map((r) => [
      r.name,
      `${r.workers}`,
      `${r.runs}`,
      fixed(r.runsPerSec, 0),
      fixed(r.tasksPerSec, 0),
      fixed(r.runP50),
      fixed(r.runP95),
    ]),
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

interface Target {
  name: string;
  measured: string;
  met: boolean | undefined;
}

function targets(f: Figures): Target[] {
  const base = plain(f);
  const shared100 = f.single.find((r) => r.name === "shared queue, 100 flows");
  const out: Target[] = [];
  if (base && shared100) {
    const r = shared100.tasksPerSec / base.tasksPerSec;
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
      name: "≥ 1,000 single-step tasks/s (plain)",
      measured: fixed(base.tasksPerSec, 0),
      met: base.tasksPerSec >= 1000,
    });
    out.push({
      name: "pickup p50 ≤ 50 ms (plain)",
      measured: `${fixed(base.p50)} ms`,
      met: base.p50 <= 50,
    });
  }
  if (base && f.floor) {
    const r = f.floor.tasksPerSec / base.tasksPerSec;
    out.push({
      name: "engine ≤ 3× the raw PGMQ loop (raw ÷ engine tasks/s)",
      measured: ratio(r),
      met: r <= 3,
    });
  }
  if (base && f.peer) {
    const r = base.tasksPerSec / f.peer.tasksPerSec;
    out.push({
      name: "ahead of graphile-worker (engine ÷ peer tasks/s)",
      measured: ratio(r),
      met: r > 1,
    });
  }
  return out;
}

function targetRows(f: Figures): Rows {
  return [
    ["target", "measured", "met"],
    ...targets(f).map((t) => [t.name, t.measured, t.met ? "yes" : "no"]),
  ];
}

function settings(f: Figures): string {
  const o = f.options;
  return [
    `${o.tasks} tasks per throughput scenario (a backlog sent in one transaction, drained; tasks/s over first claim → last completion)`,
    `${o.latencyTasks} runs started one at a time at ${o.rate}/s for pickup latency (sending transaction's now() → handler's first line, clocks aligned by a measured offset)`,
    `every worker: batchSize 10, maxConcurrent 10, pollIntervalMs ${o.pollIntervalMs}, maxPollSeconds ${o.maxPollSeconds}, default pool (4 connections)`,
    `memory: ${o.memoryTasks} tasks in a worker process of its own`,
  ].map((l) => `- ${l}`).join("\n");
}

function sections(f: Figures): Rows[] {
  const out: Rows[] = [];
  if (f.single.length > 0) out.push(singleRows(f));
  if (f.floor || f.peer) out.push(comparisonRows(f));
  if (f.chain.length > 0) out.push(chainRows(f));
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
