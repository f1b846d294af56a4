import type { StepTimedOut } from "../dsl/abort_reasons.ts";

/**
 * How long a handler whose step timed out gets, after its `ctx.signal` aborted, to end on its own
 * before its attempt is failed without it. A claim hides the message for the timeout + 2 s, so a
 * failure reported within the timeout + 1 s (and its retry, with the flow's backoff) lands before
 * the message could be read again; and a second is enough for a handler that honours the signal.
 */
export const TIMEOUT_GRACE_MS = 1_000;

/** Where the race hears that a task's step timed out (a tracked task, see `cancellations.ts`). */
export interface TimeoutWatch {
  /** Calls `expired` once the step's timeout has passed (at once if it already has). */
  onTimeout(expired: (reason: StepTimedOut) => void): void;
}

/**
 * `work`, unless the task's step times out (`watch`) and `work` has not settled `graceMs` later:
 * then it rejects with the {@link StepTimedOut}, and `work` is abandoned (it may run on, but
 * nothing waits for it and its result goes nowhere). Any other abort (a cancelled run, a
 * shutdown) is waited out, as before. Without a watch, `work` itself.
 */
export function settleOrTimeOut<T>(
  work: Promise<T>,
  watch: TimeoutWatch | undefined,
  graceMs: number = TIMEOUT_GRACE_MS,
): Promise<T> {
  if (watch === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    let grace: ReturnType<typeof setTimeout> | undefined;
    // A hook rather than a listener on the signal: nothing is added and removed per task.
    watch.onTimeout((reason) => {
      if (!settled) grace = setTimeout(() => reject(reason), graceMs);
    });
    work.then(
      (value) => {
        settled = true;
        clearTimeout(grace);
        resolve(value);
      },
      (error) => {
        settled = true;
        clearTimeout(grace);
        reject(error);
      },
    );
  });
}
