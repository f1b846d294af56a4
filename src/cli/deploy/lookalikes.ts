/**
 * Queue names one edit apart (`thread_procesing` beside `thread_processing`): a typo in a route
 * map creates a shared queue nobody reads, and its tasks wait there for ever. `pgflow plan` and
 * `pgflow compile` warn when a new shared queue looks like an existing one; `pgflow queues list`
 * marks such pairs.
 *
 * @module
 */

/** A queue name that looks like another one. */
export interface Lookalike {
  /** The new (or listed) queue. */
  readonly queue: string;
  /** The queue it is one edit from. */
  readonly like: string;
}

/**
 * Whether `a` and `b` are one edit apart: one character inserted, removed, replaced, or two
 * neighbours swapped. A digit replaced by a digit does not count (`shard_1`, `shard_2` are a
 * series, not a typo), nor do equal names.
 *
 * @example
 * ```ts
 * import { oneEditApart } from "./lookalikes.ts";
 *
 * oneEditApart("thread_procesing", "thread_processing"); // true
 * oneEditApart("shard_1", "shard_2"); // false
 * ```
 */
export function oneEditApart(a: string, b: string): boolean {
  if (a === b || Math.abs(a.length - b.length) > 1) return false;
  let start = 0;
  while (start < a.length && start < b.length && a[start] === b[start]) start++;
  if (a.length !== b.length) {
    const [shorter, longer] = a.length < b.length ? [a, b] : [b, a];
    return shorter.slice(start) === longer.slice(start + 1);
  }
  const swapped = a[start] === b[start + 1] && a[start + 1] === b[start] &&
    a.slice(start + 2) === b.slice(start + 2);
  const replaced = a.slice(start + 1) === b.slice(start + 1) &&
    !(/\d/.test(a[start]) && /\d/.test(b[start]));
  return swapped || replaced;
}

/**
 * Each of `names` that is one edit from one of `others` (itself excluded), in the order given.
 *
 * @example
 * ```ts
 * import { lookalikes } from "./lookalikes.ts";
 *
 * lookalikes(["thread_procesing"], ["thread_processing", "slack_delivery"]);
 * // [{ queue: "thread_procesing", like: "thread_processing" }]
 * ```
 */
export function lookalikes(names: Iterable<string>, others: Iterable<string>): Lookalike[] {
  const pool = [...new Set(others)];
  const found: Lookalike[] = [];
  for (const queue of new Set(names)) {
    for (const like of pool) if (oneEditApart(queue, like)) found.push({ queue, like });
  }
  return found;
}

/**
 * The warning for one lookalike.
 *
 * @example
 * ```ts
 * import { lookalikeWarning } from "./lookalikes.ts";
 *
 * lookalikeWarning({ queue: "thread_procesing", like: "thread_processing" });
 * ```
 */
export function lookalikeWarning(l: Lookalike): string {
  return `the new shared queue ${l.queue} is one letter from the queue ${l.like}: a typo in a ` +
    "route map? A queue nobody reads keeps its tasks waiting (pgflow coverage shows them MISSING)";
}
