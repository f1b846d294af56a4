import type { AnyFlow } from "../dsl/extract.ts";
import { pairKey, pairKeys } from "../util/pair_key.ts";
import type { SupportedPair } from "./claim.ts";
import type { AttemptIdentity } from "./report.ts";
import type { QueueWakeups } from "./wakeups.ts";

/**
 * The wake-up `Completer.setReader` wants: while the poll loop waits for a notification, a
 * completion of a step that a step this worker serves depends on wakes it to read at once,
 * carrying the completion, so the step it releases on this queue is sent and claimed in the same
 * call. Other completions go on their own: an extra empty read would cost more.
 */
export function carryReleasedWork(
  wakeups: QueueWakeups,
  polling: AbortSignal,
  flows: readonly AnyFlow[],
  supported: readonly SupportedPair[],
): (tasks: readonly AttemptIdentity[]) => boolean {
  const feeders = feederPairs(flows, supported);
  return (tasks) => {
    if (polling.aborted || !wakeups.waiting) return false;
    if (!tasks.some((t) => feeders.has(pairKey(t.flowSlug ?? "", t.stepSlug)))) return false;
    wakeups.wake();
    return true;
  };
}

/**
 * The dependencies of the steps a worker serves, as {@link pairKey}s: completing one of them may
 * start a step the worker claims.
 */
function feederPairs(
  flows: readonly AnyFlow[],
  supported: readonly SupportedPair[],
): ReadonlySet<string> {
  const served = pairKeys(supported);
  const feeders = new Set<string>();
  for (const flow of flows) {
    for (const step of flow.steps()) {
      if (!served.has(pairKey(flow.slug, step.slug))) continue;
      for (const dep of step.dependencies) feeders.add(pairKey(flow.slug, dep));
    }
  }
  return feeders;
}
