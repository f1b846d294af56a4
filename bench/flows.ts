/**
 * The flows the benchmarks run: no-op handlers that only note when they started, so the figures
 * measure the engine rather than the work.
 */
import { Flow, routeFlow, withStepQueues } from "../mod.ts";
import type { Json, StepContext } from "../mod.ts";
import { wallMs } from "./clock.ts";

/** Handler start times (wall ms) by `queue:msg_id`, filled by every benchmark handler. */
export const handlerStarts = new Map<string, number>();

/** Times each step of each run was handled, by `run_id␟step_slug` (the exactly-once ledger). */
export const handlerRuns = new Map<string, number>();

function noop(_input: unknown, context: StepContext<Json>): null {
  const task = context.stepTask;
  handlerStarts.set(`${task.queue_name}:${task.msg_id}`, wallMs());
  const key = `${task.run_id}\u001f${task.step_slug}`;
  handlerRuns.set(key, (handlerRuns.get(key) ?? 0) + 1);
  return null;
}

/** A one-step flow with the given slug. */
export function singleStep(slug: string) {
  return new Flow<Json>({ slug }).step({ slug: "work" }, noop);
}

/** The plain flow: its one step on the flow's own queue. */
export const plainFlow = singleStep("bench_plain");

/**
 * The same flow under another slug, left out of the headline template: the worker of the
 * public-API cell compiles it at its start, as a user's worker does.
 */
export const defaultsFlow = singleStep("bench_defaults");

/** The same flow with its step on a generated private queue. */
export const privateFlow = withStepQueues(singleStep("bench_private"));

/** `count` concrete flows (versions) whose one step shares the queue `bench_shared_<count>`. */
export function sharedFlows(count: number) {
  const queue = `bench_shared_${count}`;
  return {
    queue,
    flows: Array.from(
      { length: count },
      (_, i) => routeFlow(singleStep(`bench_s${count}_v${i + 1}`), { queues: { work: queue } }),
    ),
  };
}

function chain(slug: string) {
  return new Flow<Json>({ slug })
    .step({ slug: "a" }, noop)
    .step({ slug: "b", dependsOn: ["a"] }, noop)
    .step({ slug: "c", dependsOn: ["b"] }, noop);
}

/** Three steps a → b → c on the flow's own queue. */
export const plainChain = chain("bench_chain_plain");

/** Three steps a → b → c; a and b grouped on one shared queue, c on another. */
export const groupedChain = routeFlow(chain("bench_chain_grouped"), {
  queues: { a: "bench_grouped", b: "bench_grouped", c: "bench_tail" },
});

/** The same three steps, each on its own private queue. */
export const privateChain = withStepQueues(chain("bench_chain_private"));
