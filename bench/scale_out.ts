/**
 * Server-side cost as workers are added: this engine's workers on one shared queue (every worker
 * polls the same queue for the same flow) — and, with --scale-separate, one queue per worker —
 * beside as many graphile-worker runners. Every point drains a backlog sized to last about
 * `seconds` and reads, around that drain, the server's CPU (per task) and the share of active
 * backends waiting on the NOTIFY lock (server_probe.ts); then runs started one by one give the
 * pickup. The curve runs on used tables: before its first point, {@link WARM_UP_TASKS} tasks of
 * each engine go through the database; each point also runs {@link WARM_UP_PER_WORKER} tasks per
 * worker first (connections opened, the hot path planned in every new backend).
 * Every worker runs in this process with its own pool, as several Edge isolates would each have
 * theirs (the workers of one process share one LISTEN connection, as in an isolate running several).
 */
import postgres from "postgres";
import { Rates, WARM_UP_TASKS } from "./cells.ts";
import { type EngineSettings, pacedLatencies, startWorkers, stopWorkers } from "./engine.ts";
import { plainChain, singleStep } from "./flows.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { GraphileRunners } from "./peer_graphile.ts";
import { notifyWaitShare, ServerProbe } from "./server_probe.ts";
import { percentile } from "./stats.ts";

/** One point of the curve. */
export interface ScalePoint {
  readonly name: string;
  /**
   * The engine on one queue or on a queue per worker, or graphile-worker's runners (the peer);
   * the "chain" layouts run the 3-step chain (tasks/s counts its three tasks per run).
   */
  readonly layout: "shared" | "separate" | "graphile-worker" | "chain" | "graphile-worker chain";
  readonly workers: number;
  readonly tasks: number;
  readonly seconds: number;
  readonly tasksPerSec: number;
  /** Server CPU ms per task over the drain (NaN for a server not on this machine). */
  readonly cpuMsPerTask: number;
  /** Share of sampled active backends waiting on the NOTIFY lock (pg_locks), 0..1. */
  readonly notifyWait: number;
  /** The same from pg_stat_activity's wait event Lock/object (a cross-check). */
  readonly objectWait: number;
  readonly samples: number;
  readonly p50: number;
  readonly p95: number;
}

/** What the curve needs besides the run's settings. */
export interface ScaleLoad {
  readonly counts: readonly number[];
  /** Seconds each point's drain is sized to last. */
  readonly seconds: number;
  /** Also the layout with a queue per worker. */
  readonly separate: boolean;
}

const shared = singleStep("bench_scale_shared");

/** Tasks each worker runs before a point is measured. */
export const WARM_UP_PER_WORKER = 50;
const separate = Array.from({ length: 16 }, (_, i) => singleStep(`bench_scale_sep_${i + 1}`));

/** First guess of a point's tasks/s, until one is measured. */
const GUESS = 3000;

/**
 * One scenario per (layout, worker count), to be run in turn each round, graphile-worker's runner
 * counts included, so that a fall the machine causes shows in both. The first scenario run warms
 * the database for both engines.
 */
export function scaleOutScenarios(
  base: EngineSettings,
  load: ScaleLoad,
): [string, () => Promise<ScalePoint>][] {
  const rates = new Rates();
  let warmed = false;
  const measured = async (fn: (s: EngineSettings, probe: ServerProbe) => Promise<ScalePoint>) => {
    // One connection produces and polls; the probe leaves it out of the figures.
    const sql = postgres(base.url, { max: 1, onnotice: () => {} });
    const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const probe = await ServerProbe.open(base.url, [pid]);
    const s: EngineSettings = { ...base, sql, latencyTasks: Math.min(100, base.latencyTasks) };
    try {
      if (!warmed) {
        warmed = true;
        await warmUp(s);
      }
      return await fn(s, probe);
    } finally {
      await probe.close();
      await sql.end({ timeout: 5 });
    }
  };
  const layouts = load.separate ? (["shared", "separate"] as const) : (["shared"] as const);
  const engine = layouts.flatMap((layout) =>
    load.counts.map((n): [string, () => Promise<ScalePoint>] => {
      const name = `${n} worker${n === 1 ? "" : "s"}, ${layout} queue${
        layout === "separate" ? "s" : ""
      }`;
      return [name, () => measured((s, probe) => point(s, probe, rates, load, layout, n, name))];
    })
  );
  const peer = load.counts.map((n): [string, () => Promise<ScalePoint>] => {
    const name = `${n} graphile-worker runner${n === 1 ? "" : "s"}`;
    return [name, () => measured((s, probe) => peerPoint(s, probe, rates, load, n, name))];
  });
  if (!load.counts.includes(CHAIN_WORKERS)) return [...engine, ...peer];
  const chains: [string, () => Promise<ScalePoint>][] = [
    [
      `${CHAIN_WORKERS} workers, 3-step chain`,
      () =>
        measured((s, probe) =>
          chainPoint(s, probe, rates, load, `${CHAIN_WORKERS} workers, 3-step chain`)
        ),
    ],
    [
      `${CHAIN_WORKERS} graphile-worker runners, chained jobs`,
      () =>
        measured((s, probe) =>
          peerPoint(
            s,
            probe,
            rates,
            load,
            CHAIN_WORKERS,
            `${CHAIN_WORKERS} graphile-worker runners, chained jobs`,
            "chain",
          )
        ),
    ],
  ];
  return [...engine, ...peer, ...chains];
}

/** Workers (runners) of the chain points: the "four". */
export const CHAIN_WORKERS = 4;

/** {@link WARM_UP_TASKS} tasks of the shared flow and as many graphile-worker jobs. */
async function warmUp(s: EngineSettings): Promise<void> {
  const workers = await startWorkers(s, [{ target: shared }]);
  try {
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, [shared.slug], WARM_UP_TASKS);
    await waitRunsCompleted(s.sql, [shared.slug], since, WARM_UP_TASKS, 300_000, 100);
  } finally {
    await stopWorkers(workers);
  }
  const peer = await GraphileRunners.start(s, "single");
  try {
    await peer.addJobs(s.sql, WARM_UP_TASKS);
    await peer.waitFor(WARM_UP_TASKS);
  } finally {
    await peer.stop();
  }
}

function figures(
  name: string,
  layout: ScalePoint["layout"],
  workers: number,
  tasks: number,
  seconds: number,
  probe: Awaited<ReturnType<ServerProbe["stop"]>>,
  latencies: number[],
): ScalePoint {
  return {
    name,
    layout,
    workers,
    tasks,
    seconds,
    tasksPerSec: tasks / seconds,
    cpuMsPerTask: probe.cpuMs / tasks,
    notifyWait: notifyWaitShare(probe),
    objectWait: probe.active > 0 ? probe.objectWaitEvents / probe.active : NaN,
    samples: probe.samples,
    p50: percentile(latencies, 50),
    p95: percentile(latencies, 95),
  };
}

async function point(
  s: EngineSettings,
  probe: ServerProbe,
  rates: Rates,
  load: ScaleLoad,
  layout: "shared" | "separate",
  n: number,
  name: string,
): Promise<ScalePoint> {
  const flows = layout === "shared" ? [shared] : separate.slice(0, n);
  const specs = layout === "shared"
    ? Array.from({ length: n }, () => ({ target: shared }))
    : flows.map((flow) => ({ target: flow }));
  const slugs = flows.map((f) => f.slug);
  const workers = await startWorkers(s, specs);
  try {
    // Cold, 16 workers' 64 new backends spent more CPU planning than the measured backlog took to
    // run on two cores: without this the curve measured start-up, not scale.
    const warmSince = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, WARM_UP_PER_WORKER * n);
    await waitRunsCompleted(s.sql, slugs, warmSince, WARM_UP_PER_WORKER * n, 180_000, 100);
    const tasks = rates.size(name, load.seconds, GUESS, `1 worker, ${layout}`);
    await probe.start();
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, tasks);
    await waitRunsCompleted(s.sql, slugs, since, tasks, 300_000, 100);
    const cost = await probe.stop();
    const window = await taskWindow(s.sql, slugs, since);
    rates.note(name, window.tasks / window.seconds);
    if (n === 1) rates.note(`1 worker, ${layout}`, window.tasks / window.seconds);
    const latencies = await pacedLatencies(s, slugs);
    return figures(name, layout, n, window.tasks, window.seconds, cost, latencies);
  } finally {
    await stopWorkers(workers);
  }
}

async function peerPoint(
  s: EngineSettings,
  probe: ServerProbe,
  rates: Rates,
  load: ScaleLoad,
  n: number,
  name: string,
  shape: "single" | "chain" = "single",
): Promise<ScalePoint> {
  const peer = await GraphileRunners.start(s, shape, n);
  const perUnit = shape === "single" ? 1 : 3;
  try {
    const warm = Math.ceil((WARM_UP_PER_WORKER * n) / perUnit);
    await peer.addJobs(s.sql, warm);
    await peer.waitFor(warm);
    const units = rates.size(
      name,
      load.seconds,
      GUESS / perUnit,
      shape === "single" ? "1 graphile-worker runner" : undefined,
    );
    await probe.start();
    peer.resetWindow();
    const target = peer.done + units;
    await peer.addJobs(s.sql, units);
    await peer.waitFor(target);
    const cost = await probe.stop();
    const seconds = (peer.last - peer.first) / 1000;
    rates.note(name, units / seconds);
    if (n === 1 && shape === "single") rates.note("1 graphile-worker runner", units / seconds);
    const latencies = shape === "single" ? await peer.paced(s.sql, s.latencyTasks, s.rate) : [];
    const layout = shape === "single" ? "graphile-worker" : "graphile-worker chain";
    return figures(name, layout, n, units * perUnit, seconds, cost, latencies);
  } finally {
    await peer.stop();
  }
}

/** {@link CHAIN_WORKERS} workers on the 3-step chain's queue (no latency: runs/s and cost only). */
async function chainPoint(
  s: EngineSettings,
  probe: ServerProbe,
  rates: Rates,
  load: ScaleLoad,
  name: string,
): Promise<ScalePoint> {
  const n = CHAIN_WORKERS;
  const slugs = [plainChain.slug];
  const workers = await startWorkers(s, Array.from({ length: n }, () => ({ target: plainChain })));
  try {
    const warm = Math.ceil((WARM_UP_PER_WORKER * n) / 3);
    const warmSince = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, warm);
    await waitRunsCompleted(s.sql, slugs, warmSince, warm, 180_000, 100);
    const runs = rates.size(name, load.seconds, GUESS / 3);
    await probe.start();
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, runs);
    await waitRunsCompleted(s.sql, slugs, since, runs, 300_000, 100);
    const cost = await probe.stop();
    const window = await taskWindow(s.sql, slugs, since);
    rates.note(name, runs / window.seconds);
    return figures(name, "chain", n, window.tasks, window.seconds, cost, []);
  } finally {
    await stopWorkers(workers);
  }
}
