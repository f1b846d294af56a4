/**
 * The peer's three-step chain: graphile-worker jobs a → b → c, each job adding the next
 * (`helpers.addJob`) before it completes, at the same concurrency as the engine's worker. Runs/s
 * drains a backlog of `a` jobs added in one statement; run latency is from `a`'s add (its
 * `run_at`, the adding transaction's now()) to the end of `c`'s task function, on chains started
 * at a fixed rate. The engine's chain is measured the same way: start_flow's now() to the
 * completing transaction's now() (bench/engine.ts).
 */
import { Logger, run } from "graphile-worker";
import { sleep } from "../src/util/backoff.ts";
import { wallMs } from "./clock.ts";
import type { ChainResult, EngineSettings } from "./engine.ts";
import { GRAPHILE_VERSION } from "./peer_graphile.ts";
import { percentile } from "./stats.ts";

/** Chains draining a backlog, then `paced` chains started at `rate` per second. */
export async function measureGraphileChain(
  s: EngineSettings,
  runs: number,
  paced: number,
  rate: number,
): Promise<ChainResult> {
  let done = 0;
  let first = NaN;
  let last = NaN;
  let latencies: number[] | undefined;
  const runner = await run({
    connectionString: s.url,
    concurrency: s.maxConcurrent,
    noHandleSignals: true,
    pollInterval: 2000,
    logger: new Logger(() => () => {}),
    taskList: {
      a: async (_payload, helpers) => {
        const at = helpers.job.run_at.getTime() + s.offsetMs;
        if (Number.isNaN(first)) first = wallMs();
        await helpers.addJob("b", { at });
      },
      b: async (payload, helpers) => {
        await helpers.addJob("c", payload as { at: number });
      },
      c: (payload) => {
        last = wallMs();
        done++;
        latencies?.push(last - (payload as { at: number }).at);
        return Promise.resolve();
      },
    },
  });
  const waitFor = async (n: number) => {
    const deadline = wallMs() + 180_000;
    while (done < n) {
      if (wallMs() > deadline) throw new Error(`graphile-worker chains: ${done} of ${n} done`);
      await sleep(20);
    }
  };
  try {
    await s.sql`
      select count(graphile_worker.add_job('a', '{}'::json))
      from generate_series(1, ${runs}::integer)`;
    await waitFor(runs);
    const seconds = (last - first) / 1000;
    latencies = [];
    const t0 = wallMs();
    for (let i = 0; i < paced; i++) {
      const wait = t0 + (i * 1000) / rate - wallMs();
      if (wait > 0) await sleep(wait);
      await s.sql`select graphile_worker.add_job('a', '{}'::json)`;
    }
    await waitFor(runs + paced);
    return {
      name: `graphile-worker ${GRAPHILE_VERSION}, chained jobs`,
      workers: 1,
      runs,
      runsPerSec: runs / seconds,
      tasksPerSec: (3 * runs) / seconds,
      runP50: percentile(latencies, 50),
      runP95: percentile(latencies, 95),
    };
  } finally {
    await runner.stop();
  }
}
