/**
 * End-to-end engine figures: workers from `mod.ts` running no-op flows on the benchmark database.
 * Throughput drains a backlog sent in one transaction; pickup latency is measured on runs started
 * one by one at a fixed rate, from the sending transaction's `now()` to the handler's first line.
 */
import type postgres from "postgres";
import {
  createLogger,
  createWorker,
  type EdgeWorkerConfig,
  type FlowWorker,
  type WorkerTarget,
} from "../mod.ts";
import { groupedChain, handlerStarts, privateChain } from "./flows.ts";
import {
  dbNow,
  sendTimes,
  startBacklog,
  startPaced,
  taskWindow,
  waitRunsCompleted,
} from "./load.ts";
import { percentile } from "./stats.ts";

/** What every engine scenario shares. */
export interface EngineSettings {
  readonly url: string;
  /** The producer's pool. */
  readonly sql: postgres.Sql;
  /** A connection for waiting on the work and reading its window, apart from the producer's. */
  readonly watch?: postgres.Sql;
  /** DB → wall clock offset (see clock.ts). */
  readonly offsetMs: number;
  readonly tasks: number;
  readonly latencyTasks: number;
  readonly rate: number;
  readonly maxConcurrent: number;
  readonly batchSize: number;
  readonly pollIntervalMs: number;
  readonly maxPollSeconds: number;
}

/** One scenario's figures. */
export interface EngineResult {
  readonly name: string;
  readonly tasks: number;
  readonly tasksPerSec: number;
  readonly p50: number;
  readonly p95: number;
}

/** One worker of a scenario: its target and its queue selection. */
export interface WorkerSpec {
  readonly target: WorkerTarget;
  readonly queueName?: string;
  readonly stepSlug?: string;
}

/**
 * `createWorker` for a target only known as a `WorkerTarget` (its queue selection checked when
 * the worker is made, not by the compiler).
 */
export function anyWorker(
  target: WorkerTarget,
  config: EdgeWorkerConfig & { readonly queueName?: string; readonly stepSlug?: string },
): FlowWorker {
  return (createWorker as (t: WorkerTarget, c: typeof config) => FlowWorker)(target, config);
}

/** Starts one worker per spec with the benchmark's settings. */
export async function startWorkers(
  s: EngineSettings,
  specs: readonly WorkerSpec[],
): Promise<FlowWorker[]> {
  const workers = specs.map((spec) =>
    anyWorker(spec.target, {
      connectionString: s.url,
      ...(spec.queueName !== undefined ? { queueName: spec.queueName } : {}),
      ...(spec.stepSlug !== undefined ? { stepSlug: spec.stepSlug } : {}),
      maxConcurrent: s.maxConcurrent,
      batchSize: s.batchSize,
      pollIntervalMs: s.pollIntervalMs,
      maxPollSeconds: s.maxPollSeconds,
      functionName: "bench",
      logger: createLogger({ level: "warn" }),
    })
  );
  for (const w of workers) await w.start();
  return workers;
}

/** Stops `workers`. */
export async function stopWorkers(workers: readonly FlowWorker[]): Promise<void> {
  await Promise.all(workers.map((w) => w.stop()));
}

/** A single-step scenario: one worker (or several), runs spread round-robin over `slugs`. */
export async function singleStepScenario(
  s: EngineSettings,
  name: string,
  spec: WorkerSpec | readonly WorkerSpec[],
  slugs: readonly string[],
): Promise<EngineResult> {
  const workers = await startWorkers(s, "target" in spec ? [spec] : spec);
  try {
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, s.tasks);
    await waitRunsCompleted(s.sql, slugs, since, s.tasks);
    const window = await taskWindow(s.sql, slugs, since);

    const latencies = await pacedLatencies(s, slugs);
    return {
      name,
      tasks: window.tasks,
      tasksPerSec: window.tasks / window.seconds,
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
    };
  } finally {
    await stopWorkers(workers);
  }
}

/** Send → handler start (ms) of `latencyTasks` runs started at `rate` per second. */
export async function pacedLatencies(
  s: EngineSettings,
  slugs: readonly string[],
): Promise<number[]> {
  handlerStarts.clear();
  const since = await dbNow(s.sql);
  await startPaced(s.sql, slugs, s.latencyTasks, s.rate);
  await waitRunsCompleted(s.sql, slugs, since, s.latencyTasks);
  const sent = await sendTimes(s.sql, slugs, since, s.offsetMs);
  const latencies: number[] = [];
  for (const [key, at] of sent) {
    const started = handlerStarts.get(key);
    if (started !== undefined) latencies.push(started - at);
  }
  return latencies;
}

/**
 * Run latency (ms) of `count` runs of `slug` started one by one at `rate` per second: start_flow's
 * now() to the now() of the transaction that completed the run's last step.
 */
export async function runLatencies(
  s: EngineSettings,
  slug: string,
  count: number,
  rate: number,
): Promise<number[]> {
  const since = await dbNow(s.sql);
  await startPaced(s.sql, [slug], count, rate);
  await waitRunsCompleted(s.sql, [slug], since, count);
  const rows = await s.sql<{ ms: number }[]>`
    select extract(epoch from completed_at - started_at)::float8 * 1000 as ms
    from pgflow.runs where flow_slug = ${slug} and started_at >= ${since}::timestamptz`;
  return rows.map((r) => r.ms);
}

/** Three-step runs: throughput in runs/s and run latency (start_flow → run completed). */
export interface ChainResult {
  readonly name: string;
  readonly workers: number;
  readonly runs: number;
  readonly runsPerSec: number;
  readonly tasksPerSec: number;
  readonly runP50: number;
  readonly runP95: number;
}

/** How many chain runs a chain scenario drains, and how many it starts one by one, how fast. */
export interface ChainLoad {
  /** Runs in the backlog (runs/s). */
  readonly runs: number;
  /** Runs started one at a time for run latency. */
  readonly paced: number;
  /** Runs per second while pacing (low: the unloaded hand-off). */
  readonly rate: number;
}

async function chainScenario(
  s: EngineSettings,
  load: ChainLoad,
  name: string,
  specs: readonly WorkerSpec[],
  slug: string,
): Promise<ChainResult> {
  const workers = await startWorkers(s, specs);
  try {
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, [slug], load.runs);
    await waitRunsCompleted(s.sql, [slug], since, load.runs);
    const window = await taskWindow(s.sql, [slug], since);

    const ms = await runLatencies(s, slug, load.paced, load.rate);
    return {
      name,
      workers: workers.length,
      runs: load.runs,
      runsPerSec: load.runs / window.seconds,
      tasksPerSec: window.tasks / window.seconds,
      runP50: percentile(ms, 50),
      runP95: percentile(ms, 95),
    };
  } finally {
    await stopWorkers(workers);
  }
}

/**
 * The three-step flow grouped (a, b on one shared queue; c on another) and on private queues; the
 * flow on its own queue with one worker is a headline cell (cells.ts), beside graphile-worker's.
 */
export function chainScenarios(
  s: EngineSettings,
  load: ChainLoad,
): [string, () => Promise<ChainResult>][] {
  return [
    [
      "a+b shared, c shared (2 workers)",
      () =>
        chainScenario(s, load, "a+b shared, c shared (2 workers)", [
          { target: [groupedChain], queueName: "bench_grouped" },
          { target: [groupedChain], queueName: "bench_tail" },
        ], "bench_chain_grouped"),
    ],
    [
      "private per-step queues (3 workers)",
      () =>
        chainScenario(
          s,
          load,
          "private per-step queues (3 workers)",
          ["a", "b", "c"].map((stepSlug) => ({ target: privateChain, stepSlug })),
          "bench_chain_private",
        ),
    ],
  ];
}
