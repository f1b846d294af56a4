/**
 * The worker's concurrency bound. Each running task holds one slot and frees it when it ends, so
 * the poll loop refills exactly what finished (no waiting for a whole batch).
 */
export class Slots {
  readonly #capacity: number;
  readonly #running = new Set<Promise<unknown>>();
  #waiters: (() => void)[] = [];

  /** @param capacity the most tasks running at once */
  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  /** The most tasks running at once. */
  get capacity(): number {
    return this.#capacity;
  }

  /** Slots free right now. */
  get free(): number {
    return this.#capacity - this.#running.size;
  }

  /** Tasks running right now. */
  get running(): number {
    return this.#running.size;
  }

  /** Runs `task` in a slot; the slot frees when it settles. Never rejects the caller. */
  run(task: () => Promise<unknown>): void {
    const promise = task().catch(() => {}).finally(() => {
      this.#running.delete(promise);
      const waiters = this.#waiters;
      this.#waiters = [];
      for (const wake of waiters) wake();
    });
    this.#running.add(promise);
  }

  /** Resolves once at least one slot is free, or when `signal` aborts. */
  async waitForFree(signal: AbortSignal): Promise<void> {
    while (this.free <= 0 && !signal.aborted) {
      await new Promise<void>((resolve) => {
        const wake = () => {
          signal.removeEventListener("abort", wake);
          resolve();
        };
        this.#waiters.push(wake);
        signal.addEventListener("abort", wake, { once: true });
      });
    }
  }

  /**
   * Resolves once at least `count` slots are free, `maxWaitMs` have passed, or `signal` aborts,
   * whichever comes first: a bounded wait, so one slow task never holds the others back.
   */
  async waitForFreeAtLeast(count: number, maxWaitMs: number, signal: AbortSignal): Promise<void> {
    if (this.free >= count || signal.aborted) return;
    let timedOut = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    let wakeNow: (() => void) | undefined;
    const deadline = new Promise<void>((resolve) => {
      timer = setTimeout(() => {
        timedOut = true;
        wakeNow?.();
        resolve();
      }, maxWaitMs);
    });
    try {
      while (this.free < count && !timedOut && !signal.aborted) {
        await Promise.race([
          deadline,
          new Promise<void>((resolve) => {
            const wake = () => {
              signal.removeEventListener("abort", wake);
              resolve();
            };
            wakeNow = wake;
            this.#waiters.push(wake);
            signal.addEventListener("abort", wake, { once: true });
          }),
        ]);
      }
    } finally {
      clearTimeout(timer);
    }
  }

  /** Resolves when every running task has settled (including tasks started meanwhile). */
  async drain(): Promise<void> {
    while (this.#running.size > 0) await Promise.allSettled([...this.#running]);
  }
}
