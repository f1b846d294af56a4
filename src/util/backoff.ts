/**
 * Capped exponential backoff with jitter, so a database outage is retried calmly instead of in a
 * hot loop, and many workers do not retry in lockstep.
 */

/** How retries are spaced. */
export interface BackoffOptions {
  /** First delay in milliseconds. */
  readonly baseMs: number;
  /** Largest delay in milliseconds. */
  readonly maxMs: number;
}

/** The default spacing: 250 ms doubling up to 10 s. */
export const DEFAULT_BACKOFF: BackoffOptions = Object.freeze({ baseMs: 250, maxMs: 10_000 });

/**
 * The delay before retry number `attempt` (1-based): `min(max, base * 2^(attempt-1))`, then
 * scaled by a random factor in [0.5, 1) ("equal jitter": never zero, never above the cap).
 */
export function backoffDelay(
  attempt: number,
  options: BackoffOptions = DEFAULT_BACKOFF,
  random: () => number = Math.random,
): number {
  const exp = Math.min(options.maxMs, options.baseMs * 2 ** Math.min(30, attempt - 1));
  return Math.round(exp * (0.5 + random() / 2));
}

/**
 * Resolves after `ms`, or at once when `signal` aborts (so a stopping worker never sits out a
 * long backoff).
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve();
    const timer = setTimeout(done, ms);
    signal?.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
  });
}

/** Options of {@link retry}. */
export interface RetryOptions {
  /** Attempts in total; `Infinity` retries until `signal` aborts. */
  readonly attempts: number;
  /** Stops retrying (the last error is thrown). */
  readonly signal?: AbortSignal;
  /** Spacing of retries. */
  readonly backoff?: BackoffOptions;
  /** Called before each wait, e.g. to log the error. */
  readonly onRetry?: (error: unknown, attempt: number, delayMs: number) => void;
  /** Whether an error is worth another attempt; default every error is. Others are thrown at once. */
  readonly retryable?: (error: unknown) => boolean;
}

/** Runs `op`, retrying failures with backoff; throws the last error when attempts run out. */
export async function retry<T>(op: () => Promise<T>, options: RetryOptions): Promise<T> {
  for (let attempt = 1;; attempt++) {
    try {
      return await op();
    } catch (error) {
      if (attempt >= options.attempts || options.signal?.aborted) throw error;
      if (options.retryable && !options.retryable(error)) throw error;
      const delay = backoffDelay(attempt, options.backoff);
      options.onRetry?.(error, attempt, delay);
      await sleep(delay, options.signal);
      if (options.signal?.aborted) throw error;
    }
  }
}
