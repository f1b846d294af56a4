/**
 * The scale-out curve: 1, 2, 4, … workers on one shared queue (every worker polls the same queue
 * for the same flow) and on separate queues (one flow, queue and worker each), each point a backlog
 * drained (tasks/s) and runs started one by one (pickup p50 / p95), after a warm-up of
 * {@link WARM_UP_PER_WORKER} tasks per worker. Every worker runs in this
 * process with its own pool, as several Edge isolates would each have theirs (the workers of one
 * process share one LISTEN connection, as they do in an isolate that runs several).
 */
import { type EngineSettings, pacedLatencies, startWorkers } from "./engine.ts";
import { measureGraphile } from "./peer_graphile.ts";
import { singleStep } from "./flows.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { percentile } from "./stats.ts";

/** One point of the curve. */
export interface ScalePoint {
  readonly name: string;
  /** The engine on one queue or on a queue per worker, or graphile-worker's runners (the peer). */
  readonly layout: "shared" | "separate" | "graphile-worker";
  readonly workers: number;
  readonly tasksPerSec: number;
  readonly p50: number;
  readonly p95: number;
}

const shared = singleStep("bench_scale_shared");

/** Tasks each worker runs before a point is measured. */
export const WARM_UP_PER_WORKER = 50;
const separate = Array.from({ length: 16 }, (_, i) => singleStep(`bench_scale_sep_${i + 1}`));

/**
 * One scenario per (layout, worker count), to be run in turn each round; with `peer`, the same
 * counts of graphile-worker runners too, so that a fall the machine causes shows in both.
 */
export function scaleOutScenarios(
  s: EngineSettings,
  counts: readonly number[],
  peer = false,
): [string, () => Promise<ScalePoint>][] {
  const engine = (["shared", "separate"] as const).flatMap((layout) =>
    counts.map((n): [string, () => Promise<ScalePoint>] => {
      const name = `${n} worker${n === 1 ? "" : "s"}, ${layout} queue${
        layout === "separate" ? "s" : ""
      }`;
      return [name, () => point(s, layout, n, name)];
    })
  );
  if (!peer) return engine;
  return [
    ...engine,
    ...counts.map((n): [string, () => Promise<ScalePoint>] => {
      const name = `${n} graphile-worker runner${n === 1 ? "" : "s"}`;
      return [name, async () => {
        const r = await measureGraphile(s, n, WARM_UP_PER_WORKER);
        return { name, layout: "graphile-worker", workers: n, ...pick(r) };
      }];
    }),
  ];
}

function pick(r: { tasksPerSec: number; p50: number; p95: number }) {
  return { tasksPerSec: r.tasksPerSec, p50: r.p50, p95: r.p95 };
}

async function point(
  s: EngineSettings,
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
    // Warm-up, not measured: every worker opens its pool's connections and each backend plans
    // the hot path once. Cold, 16 workers' 64 new backends spent more CPU planning than the
    // measured backlog took to run on two cores: the curve measured start-up, not scale.
    const warmSince = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, WARM_UP_PER_WORKER * n);
    await waitRunsCompleted(s.sql, slugs, warmSince, WARM_UP_PER_WORKER * n);
    const since = await dbNow(s.sql);
    await startBacklog(s.sql, slugs, s.tasks);
    await waitRunsCompleted(s.sql, slugs, since, s.tasks);
    const window = await taskWindow(s.sql, slugs, since);
    const latencies = await pacedLatencies(s, slugs);
    return {
      name,
      layout,
      workers: n,
      tasksPerSec: window.tasks / window.seconds,
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
    };
  } finally {
    await Promise.all(workers.map((w) => w.stop()));
  }
}
