/**
 * Workers that serve different pairs on one shared queue: four workers, and the figures of one
 * flow's runs when every worker serves it ("identical") beside when one worker serves it and the
 * three others serve one other flow each and read its messages too ("1 serving + 3 not"). A read
 * by a worker that cannot claim a message hands it back to a worker that can (pgflow._start_tasks);
 * the second row is what that costs against the first.
 */
import { type EngineResult, type EngineSettings, singleStepScenario } from "./engine.ts";
import { sharedFlows } from "./flows.ts";

/** The two scenarios, as [name, run] pairs. */
export function mixedWorkerScenarios(
  s: EngineSettings,
): [string, () => Promise<EngineResult>][] {
  const { queue, flows } = sharedFlows(4);
  const measured = [flows[0].flow.slug];
  const scenario = (
    name: string,
    targets: readonly (readonly typeof flows[number][])[],
  ): [string, () => Promise<EngineResult>] => [
    name,
    () =>
      singleStepScenario(
        s,
        name,
        targets.map((target) => ({ target, queueName: queue })),
        measured,
      ),
  ];
  return [
    scenario("4 identical workers", flows.map(() => flows)),
    scenario("1 serving + 3 not serving", flows.map((f) => [f])),
  ];
}
