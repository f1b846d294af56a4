/**
 * A short in-memory history of each queue's depth, for the sparklines: one sample per queue per
 * overview read (at most one a second), the last `size` kept. Lost when the dashboard stops, on
 * purpose: it is a glance at the last minutes, not a metrics store.
 *
 * @module
 */

/** One sample: when (ms since the epoch) and how many messages. */
export interface DepthSample {
  /** Milliseconds since the epoch. */
  readonly t: number;
  /** Messages in the queue then. */
  readonly depth: number;
}

/**
 * Depth samples per queue.
 *
 * @example
 * ```ts
 * import { DepthHistory } from "./history.ts";
 *
 * const history = new DepthHistory(150);
 * history.record(Date.now(), [{ name: "q", messages: 3 }]);
 * history.of("q"); // [{ t: …, depth: 3 }]
 * ```
 */
export class DepthHistory {
  readonly #size: number;
  readonly #samples = new Map<string, DepthSample[]>();
  #last = -Infinity;

  /** @param size the samples kept per queue */
  constructor(size: number) {
    this.#size = size;
  }

  /** Adds one sample per queue, unless the last was taken under a second ago. */
  record(t: number, queues: readonly { name: string; messages: number | null }[]): void {
    if (t - this.#last < 1000) return;
    this.#last = t;
    for (const q of queues) {
      if (q.messages === null) continue;
      const list = this.#samples.get(q.name) ?? [];
      list.push({ t, depth: q.messages });
      if (list.length > this.#size) list.splice(0, list.length - this.#size);
      this.#samples.set(q.name, list);
    }
  }

  /** The samples of one queue, oldest first. */
  of(name: string): readonly DepthSample[] {
    return this.#samples.get(name) ?? [];
  }
}
