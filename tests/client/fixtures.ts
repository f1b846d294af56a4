/**
 * Flows the client tests run with real workers: a plain greeting, a failing step, a slow step, a
 * map, a condition that skips, and a step that fails until told not to (for retry and resume).
 *
 * @module
 */
import { createClient, Flow, type FlowWorker, type PgflowClient, routeFlow } from "../../mod.ts";
import { stopAll } from "../worker/helpers.ts";

/** One step: `hello` greets the input's name. */
export const greet = new Flow<{ name: string }>({ slug: "cl_greet" })
  .step({ slug: "hello" }, (input) => ({ text: `hello ${input.name}` }));

/** `check` passes, `explode` throws (no retries), `never` never runs. */
export const failing = new Flow<{ id: number }>({ slug: "cl_failing", maxAttempts: 1 })
  .step({ slug: "check" }, (input) => input.id)
  .step({ slug: "explode", dependsOn: ["check"] }, (): number => {
    throw new Error("the disk is on fire");
  })
  .step({ slug: "never", dependsOn: ["explode"] }, (deps) => deps.explode + 1);

/** `nap` sleeps for the input's milliseconds. */
export const slow = new Flow<{ ms: number }>({ slug: "cl_slow" })
  .step({ slug: "nap" }, async (input) => {
    await new Promise((r) => setTimeout(r, input.ms));
    return input.ms;
  });

/** `split` makes words, `measure` maps over them, `total` sums the lengths. */
export const words = routeFlow(
  new Flow<{ text: string }>({ slug: "cl_words" })
    .array({ slug: "split" }, (input) => input.text.split(" "))
    .map({ slug: "measure", array: "split" }, (word) => word.length)
    .step(
      { slug: "total", dependsOn: ["measure"] },
      (deps) => deps.measure.reduce((a, b) => a + b, 0),
    ),
  { queues: { split: "cl_work", measure: "cl_work", total: "cl_work" } },
);

/** `maybe` runs only when `check` says go (else it is skipped); `final` runs either way. */
export const conditional = new Flow<{ go: boolean }>({ slug: "cl_conditional" })
  .step({ slug: "check" }, (input) => ({ go: input.go }))
  .step({ slug: "maybe", dependsOn: ["check"], if: { check: { go: true } } }, () => "went")
  .step({ slug: "final", dependsOn: ["check"] }, (deps) => (deps.check.go ? "yes" : "no"));

/** What `flaky`'s handlers did, and whether `second` throws: the tests flip it. */
export const flakyState = { firstCalls: 0, secondFails: true };

/** `first` doubles (counting its calls), `second` throws while `flakyState.secondFails`. */
export const flaky = new Flow<{ n: number }>({ slug: "cl_flaky", maxAttempts: 1 })
  .step({ slug: "first" }, (input) => {
    flakyState.firstCalls++;
    return input.n * 2;
  })
  .step({ slug: "second", dependsOn: ["first"] }, (deps): number => {
    if (flakyState.secondFails) throw new Error("the API is down");
    return deps.first + 1;
  });

/** Runs `fn` with a client on `url` and a list of workers, then stops them and closes it. */
export async function withClient(
  url: string,
  fn: (client: PgflowClient, workers: FlowWorker[]) => Promise<void>,
): Promise<void> {
  const client = createClient({ connectionString: url });
  const workers: FlowWorker[] = [];
  try {
    await fn(client, workers);
  } finally {
    await stopAll(workers);
    await client.close();
  }
}
