import { StepTimedOut } from "../dsl/abort_reasons.ts";

/**
 * How long a handler whose step timed out gets, after its `ctx.signal` aborted, to end on its own
 * before its attempt is failed without it. A claim hides the message for the timeout + 2 s, so a
 * failure reported within the timeout + 1 s (and its retry, with the flow's backoff) lands before
 * the message could be read again; and a second is enough for a handler that honours the signal.
 */
export const TIMEOUT_GRACE_MS = 1_000;

/**
 * `work`, unless `signal` aborts with a {@link StepTimedOut} and `work` has not settled
 * `graceMs` later: then it rejects with that reason, and `work` is abandoned (it may run on, but
 * nothing waits for it and its result goes nowhere). Any other abort (a cancelled run, a
 * shutdown) is waited out, as before.
 */
export function settleOrTimeOut<T>(
  work: Promise<T>,
  signal: AbortSignal | undefined,
  graceMs: number = TIMEOUT_GRACE_MS,
): Promise<T> {
  if (signal === undefined) return work;
  return new Promise<T>((resolve, reject) => {
    let grace: ReturnType<typeof setTimeout> | undefined;
    const onAbort = () => {
      if (!(signal.reason instanceof StepTimedOut)) return;
      const reason = signal.reason;
      grace = setTimeout(() => reject(reason), graceMs);
    };
    const settled = () => {
      clearTimeout(grace);
      signal.removeEventListener("abort", onAbort);
    };
    if (signal.aborted) onAbort();
    else signal.addEventListener("abort", onAbort, { once: true });
    work.then(
      (value) => {
        settled();
        resolve(value);
      },
      (error) => {
        settled();
        reject(error);
      },
    );
  });
}
