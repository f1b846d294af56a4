/**
 * The peer: graphile-worker on the same database (its own schema) running no-op jobs at the same
 * concurrency. Throughput drains a backlog added in one statement; latency is from `add_job`'s
 * `now()` (the job's run_at) to the task function's first line, on jobs added at the same rate.
 */
import { Logger, run } from "graphile-worker";
import { sleep } from "../src/util/backoff.ts";
import { wallMs } from "./clock.ts";
import type { EngineResult, EngineSettings } from "./engine.ts";
import { percentile } from "./stats.ts";

/** The graphile-worker version pinned in deno.json. */
export const GRAPHILE_VERSION = "0.16.6";

/**
 * graphile-worker's throughput and pickup with `runners` runners on one database (as many worker
 * processes would run), each at the benchmark's concurrency; with `warmUpPerRunner`, that many
 * jobs per runner run first, unmeasured (connections opened, statements prepared).
 */
export async function measureGraphile(
  s: EngineSettings,
  runners = 1,
  warmUpPerRunner = 0,
): Promise<EngineResult> {
  let started = 0;
  let completed = 0;
  let first = NaN;
  let last = NaN;
  let latencies: number[] | undefined;
  const started_ = (at: number) => {
    if (started++ === 0) first = at;
  };
  const running = [];
  for (let i = 0; i < runners; i++) {
    running.push(
      await run({
        connectionString: s.url,
        concurrency: s.maxConcurrent,
        noHandleSignals: true,
        // Its own default; LISTEN/NOTIFY wakes it on new jobs, the poll is only a fallback.
        pollInterval: 2000,
        logger: new Logger(() => () => {}),
        taskList: {
          noop: (_payload, helpers) => {
            const at = wallMs();
            started_(at);
            latencies?.push(at - (helpers.job.run_at.getTime() + s.offsetMs));
            return Promise.resolve();
          },
        },
      }),
    );
  }
  for (const runner of running) {
    runner.events.on("job:complete", () => {
      completed++;
      last = wallMs();
    });
  }
  const waitFor = async (n: number) => {
    const deadline = wallMs() + 180_000;
    while (completed < n) {
      if (wallMs() > deadline) throw new Error(`graphile-worker completed ${completed} of ${n}`);
      await sleep(20);
    }
  };
  const addJobs = (n: number) =>
    s.sql`select count(graphile_worker.add_job('noop', '{}'::json))
          from generate_series(1, ${n}::integer)`;
  try {
    const warmUp = warmUpPerRunner * runners;
    if (warmUp > 0) {
      await addJobs(warmUp);
      await waitFor(warmUp);
      started = 0;
    }
    await addJobs(s.tasks);
    await waitFor(warmUp + s.tasks);
    const seconds = (last - first) / 1000;

    latencies = [];
    const t0 = wallMs();
    for (let i = 0; i < s.latencyTasks; i++) {
      const wait = t0 + (i * 1000) / s.rate - wallMs();
      if (wait > 0) await sleep(wait);
      await s.sql`select graphile_worker.add_job('noop', '{}'::json)`;
    }
    await waitFor(warmUp + s.tasks + s.latencyTasks);
    return {
      name: `graphile-worker ${GRAPHILE_VERSION}`,
      tasks: s.tasks,
      tasksPerSec: s.tasks / seconds,
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
    };
  } finally {
    await Promise.all(running.map((r) => r.stop()));
  }
}
