/**
 * `@pgflow/shared/testing`: flows tested without a database. `runFlowInMemory` runs a flow's
 * handlers for one input with the input and context a worker builds and the run's progress as the
 * engine makes it (dependencies, maps, conditions, skips, retries on a fake clock), and reports
 * every step's status, output and attempts. Kept out of the main entry so that a worker's module
 * graph never loads it.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { runFlowInMemory } from "@pgflow/shared/testing";
 *
 * const flow = new Flow<{ n: number }>({ slug: "testing_example" })
 *   .step({ slug: "twice" }, (input) => input.n * 2);
 * const result = await runFlowInMemory(flow, { n: 21 });
 * console.log(result.output); // { twice: 42 }
 * ```
 *
 * @module
 */

export { fakeClock, runFlowInMemory } from "./src/testing/run_in_memory.ts";
export type {
  HandlerOverride,
  InMemoryAttempt,
  InMemoryClock,
  InMemoryRunResult,
  InMemoryStepResult,
  RunInMemoryOptions,
} from "./src/testing/run_in_memory.ts";
export type { InMemoryStepStatus, SkipReason } from "./src/testing/run_progress.ts";
