/**
 * Workers that serve different pairs on one shared queue: four workers, and the figures of one
 * flow's runs when every worker serves it ("identical") beside when one worker serves it and the
 * three others serve one other flow each and read its messages too ("1 serving + 3 not"). A read
 * by a worker that cannot claim a message hands it back to a worker that can (pgflow._start_tasks);
 * the second row is what that costs against the first.
 */
import { type EngineResult, type EngineSettings, pacedLatencies, startWorkers } from "./engine.ts";
import { sharedFlows } from "./flows.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { percentile } from "./stats.ts";

/** The two scenarios, as [name, run] pairs. */
export function mixedWorkerScenarios(
  s: EngineSettings,
): [string, () => Promise<EngineResult>][] {
  const { queue, flows } = sharedFlows(4);
  const measured = [flows[0].flow.slug];
  const scenario = (name: string, specs: Parameters<typeof startWorkers>[1]) =>
    [name, async () => {
      const workers = await startWorkers(s, specs);
      try {
        const since = await dbNow(s.sql);
        await startBacklog(s.sql, measured, s.tasks);
        await waitRunsCompleted(s.sql, measured, since, s.tasks);
        const window = await taskWindow(s.sql, measured, since);
        const latencies = await pacedLatencies(s, measured);
        return {
          name,
          tasks: window.tasks,
          tasksPerSec: window.tasks / window.seconds,
          p50: percentile(latencies, 50),
          p95: percentile(latencies, 95),
        };
      } finally {
        await Promise.all(workers.map((w) => w.stop()));
      }
    }] as [string, () => Promise<EngineResult>];
  return [
    scenario("4 identical workers", flows.map(() => ({ target: flows, queueName: queue }))),
    scenario(
      "1 serving + 3 not serving",
      flows.map((f) => ({ target: [f], queueName: queue })),
    ),
  ];
}
