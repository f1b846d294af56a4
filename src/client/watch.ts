/**
 * Watching a run: read it, wait for a wake-up (or a timer), read it again, and hand on every
 * reading that differs from the one before, until the run is terminal. Lost connections are
 * retried; a reading that finds a change no notification announced makes the watcher subscribe
 * again (its subscription may have died unnoticed).
 *
 * @module
 */
import { type Backend, isTransient, type Subscription, type WakeSource } from "./backend.ts";
import { RunNotFoundError } from "./errors.ts";
import { type AnyRunState, isTerminal } from "./snapshot.ts";
import { pollSource } from "./transports/poll.ts";

/** Timing of a watcher. */
export interface WatchTiming {
  /** First wait between readings when polling; doubled while nothing changes. */
  readonly pollIntervalMs: number;
  /** Longest wait between readings when polling. */
  readonly maxPollIntervalMs: number;
  /** Wait between readings on a push transport, in case a notification was lost. */
  readonly safetyIntervalMs: number;
}

/** A wake-up that a waiter can sleep on, with a timeout and an abort signal. */
class Wake {
  #pending = false;
  #resolve: ((why: "woken" | "timer") => void) | undefined;

  wake = (): void => {
    this.#pending = true;
    this.#resolve?.("woken");
  };

  sleep(ms: number, signal: AbortSignal): Promise<"woken" | "timer"> {
    if (this.#pending || signal.aborted) {
      this.#pending = false;
      return Promise.resolve("woken");
    }
    return new Promise((resolve) => {
      const done = (why: "woken" | "timer") => {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
        this.#resolve = undefined;
        this.#pending = false;
        resolve(why);
      };
      const onAbort = () => done("woken");
      const timer = setTimeout(() => done("timer"), ms);
      signal.addEventListener("abort", onAbort, { once: true });
      this.#resolve = done;
    });
  }
}

/** `promise`'s outcome, or `undefined` as soon as `signal` aborts (the promise is then unheard). */
function unlessAborted<T>(
  promise: Promise<T>,
  signal: AbortSignal,
): Promise<{ value: T } | undefined> {
  promise.catch(() => {}); // its rejection after an abort is nobody's business
  if (signal.aborted) return Promise.resolve(undefined);
  return new Promise((resolve, reject) => {
    const onAbort = () => resolve(undefined);
    signal.addEventListener("abort", onAbort, { once: true });
    promise.then(
      (value) => resolve({ value }),
      reject,
    ).finally(() => signal.removeEventListener("abort", onAbort));
  });
}

/** What tells two readings apart for events: statuses and the times they changed. */
function fingerprint(state: AnyRunState): string {
  return JSON.stringify([
    state.status,
    state.steps.map((s) => [s.status, s.startedAt]),
  ]);
}

/**
 * Yields the readings of run `runId` that differ from the previous one (the first always), and
 * returns after the terminal one, or as soon as `signal` aborts (a read under way is not waited
 * for). Throws {@link RunNotFoundError} for an unknown run, a `ClientClosedError` for an ended pool
 * and any error the database raised about the query itself; connection errors are retried with
 * backoff.
 */
export async function* watchRun(
  backend: Backend,
  runId: string,
  timing: WatchTiming,
  signal: AbortSignal,
): AsyncGenerator<AnyRunState, void, undefined> {
  const wake = new Wake();
  // Without a wake-up source (the connection could not be looked at yet), this watcher polls.
  const source: WakeSource = await backend.wakeSource().catch(() => pollSource());
  let subscription: Subscription | undefined;
  let subscribedAt = 0;
  const subscribe = async () => {
    await subscription?.close().catch(() => {});
    subscription = undefined;
    if (!source.pushes) return;
    subscribedAt = Date.now();
    // Subscribed before reading, so no change between the reading and the subscription is lost.
    subscription = await source.subscribe(runId, wake.wake).catch(() => undefined);
  };
  try {
    await subscribe();
    let last: AnyRunState | undefined;
    let pollDelay = timing.pollIntervalMs;
    let failing = false;
    let why: "woken" | "timer" = "woken";
    while (!signal.aborted) {
      let state: AnyRunState | null;
      try {
        // Not awaited past an abort: a read stuck on a lost server would hold a closing client.
        const read = await unlessAborted(backend.getRun(runId), signal);
        if (read === undefined) return;
        state = read.value;
      } catch (error) {
        if (signal.aborted) return;
        if (!isTransient(error)) throw error;
        failing = true;
        pollDelay = Math.min(pollDelay * 2, timing.maxPollIntervalMs);
        await wake.sleep(pollDelay, signal);
        continue;
      }
      if (signal.aborted) return;
      if (state === null) throw new RunNotFoundError(runId);
      const changed = last === undefined || fingerprint(state) !== fingerprint(last);
      // A change that no notification announced, or a reading after lost connections: the
      // subscription may be dead without anyone knowing. Make a new one.
      // A push transport that refused is tried again once per safety interval; meanwhile, polling.
      const resubscribe = source.pushes &&
        (failing || (changed && last !== undefined && why === "timer") ||
          (subscription === undefined && Date.now() - subscribedAt >= timing.safetyIntervalMs));
      failing = false;
      if (changed) {
        last = state;
        pollDelay = timing.pollIntervalMs;
        yield state;
        if (isTerminal(state.status)) return;
      } else {
        pollDelay = Math.min(pollDelay * 2, timing.maxPollIntervalMs);
      }
      if (resubscribe) {
        await subscribe();
        why = "woken";
        if (subscription !== undefined) continue; // read again: the new one may have missed some
      }
      const waitMs = subscription !== undefined ? timing.safetyIntervalMs : pollDelay;
      why = await wake.sleep(waitMs, signal);
    }
  } finally {
    await subscription?.close().catch(() => {});
  }
}
