/**
 * The worker's concurrency bound. Each running task holds one slot until its handler is done, so
 * the poll loop refills exactly what finished (no waiting for a whole batch), and the next read
 * goes out while the finished tasks' reports are still on their way (a read and a report in
 * flight at once, instead of one after the other).
 */
export class Slots {
  readonly #capacity: number;
  readonly #running = new Set<Promise<unknown>>();
  /** Tasks that have not released their slot (handlers running). */
  #held = 0;
  #waiters: (() => void)[] = [];

  /** @param capacity the most tasks running at once */
  constructor(capacity: number) {
    this.#capacity = capacity;
  }

  /** The most tasks running at once. */
  get capacity(): number {
    return this.#capacity;
  }

  /**
   * Slots free right now: `capacity` less the handlers running, and never more than the room left
   * for reports (`capacity` released tasks at most).
   */
  get free(): number {
    return Math.max(
      0,
      Math.min(this.#capacity - this.#held, 2 * this.#capacity - this.#running.size),
    );
  }

  /** Tasks running right now, their reports included. */
  get running(): number {
    return this.#running.size;
  }

  /**
   * Runs `task` in a slot; the slot frees when the task calls `release` (its handler is done and
   * only its report is left) or settles, whichever is first. A released task still counts in
   * `running` and `drain`, and at most `capacity` released tasks wait on their reports at once,
   * so reports that fall behind hold the next reads back. Never rejects the caller.
   */
  run(task: (release: () => void) => Promise<unknown>): void {
    let held = true;
    const release = () => {
      if (!held) return;
      held = false;
      this.#held--;
      this.#wake();
    };
    this.#held++;
    const promise = task(release).catch(() => {}).finally(() => {
      release();
      this.#running.delete(promise);
      this.#wake();
    });
    this.#running.add(promise);
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
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
