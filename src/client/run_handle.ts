/**
 * A handle on one run: wait for it, watch its events, read its state.
 *
 * @module
 */
import type { FlowCarrier } from "../dsl/extract.ts";
import type { Backend } from "./backend.ts";
import { eventsBetween } from "./diff.ts";
import { RunFailedError, RunNotFoundError, RunStatusError, RunTimeoutError } from "./errors.ts";
import { type AnyRunState, failedStep, isTerminal } from "./snapshot.ts";
import type { FlowOutputOf, RunEvent, RunState } from "./types.ts";
import { watchRun, type WatchTiming } from "./watch.ts";

/** How long `waitFor` waits when no `timeoutMs` is given: 5 minutes. */
export const DEFAULT_WAIT_TIMEOUT_MS = 300_000;

/**
 * Options of `run.waitFor`.
 *
 * @example
 * ```ts
 * import type { WaitForOptions } from "@pgflow/shared";
 *
 * const options: WaitForOptions = { timeoutMs: 30_000 };
 * ```
 */
export interface WaitForOptions {
  /** Reject with `RunTimeoutError` after this long; default 300,000 (5 minutes). */
  readonly timeoutMs?: number;
  /** Stop waiting (rejects with the signal's reason). */
  readonly signal?: AbortSignal;
}

/**
 * Options of `run.events`.
 *
 * @example
 * ```ts
 * import type { EventsOptions } from "@pgflow/shared";
 *
 * const options: EventsOptions = { signal: AbortSignal.timeout(60_000) };
 * ```
 */
export interface EventsOptions {
  /** Ends the iteration (without an error) when aborted. */
  readonly signal?: AbortSignal;
}

/**
 * A run of flow `F`, as `client.startFlow` and `client.run` return it.
 *
 * @example
 * ```ts
 * import type { FlowRun } from "@pgflow/shared";
 *
 * async function report(run: FlowRun): Promise<void> {
 *   for await (const event of run.events()) console.log(event.type);
 * }
 * ```
 */
export interface FlowRun<F extends FlowCarrier = never> {
  /** The run's id. */
  readonly runId: string;
  /** The flow it runs. */
  readonly flowSlug: string;
  /**
   * Resolves with the run's output once it completed; rejects with `RunFailedError` (naming the
   * failing step and its error) when it failed, `RunTimeoutError` when it is still running after
   * `timeoutMs`, `RunNotFoundError` when there is no such run.
   */
  waitFor(status: "completed", options?: WaitForOptions): Promise<FlowOutputOf<F>>;
  /**
   * Resolves with the run's state once it failed; rejects with `RunStatusError` when it completed
   * instead, `RunTimeoutError` after `timeoutMs`.
   */
  waitFor(status: "failed", options?: WaitForOptions): Promise<RunState<F>>;
  /** Resolves with the run's state once it completed or failed; `RunTimeoutError` after `timeoutMs`. */
  waitFor(status: "terminal", options?: WaitForOptions): Promise<RunState<F>>;
  /** The run's current state (`RunNotFoundError` when there is no such run). */
  state(): Promise<RunState<F>>;
  /**
   * The run's events in order, from its start (a late subscriber gets what already happened
   * first), ending after `run:completed` or `run:failed`.
   */
  events(options?: EventsOptions): AsyncIterableIterator<RunEvent<F>>;
}

/** Makes a handle on run `runId`. */
export function runHandle<F extends FlowCarrier>(
  backend: Backend,
  runId: string,
  flowSlug: string,
  timing: WatchTiming,
): FlowRun<F> {
  async function waitFor(
    status: "completed" | "failed" | "terminal",
    { timeoutMs = DEFAULT_WAIT_TIMEOUT_MS, signal }: WaitForOptions = {},
  ): Promise<unknown> {
    if (!(timeoutMs > 0)) {
      throw new RangeError(
        `waitFor: timeoutMs must be a positive number of milliseconds, got ${timeoutMs}`,
      );
    }
    signal?.throwIfAborted();
    const stop = new AbortController();
    const stopped = new Promise<"stopped">((resolve) =>
      stop.signal.addEventListener("abort", () => resolve("stopped"), { once: true })
    );
    const onAbort = () => stop.abort();
    signal?.addEventListener("abort", onAbort, { once: true });
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      stop.abort();
    }, timeoutMs);
    const readings = watchRun(backend, runId, timing, stop.signal);
    let last: AnyRunState | undefined;
    try {
      for (;;) {
        const next = readings.next();
        next.catch(() => {}); // awaited below, unless the deadline wins
        const result = await Promise.race([next, stopped]);
        if (result === "stopped" || result.done) break;
        last = result.value;
        if (isTerminal(last.status)) break;
      }
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      stop.abort();
      readings.return(undefined).catch(() => {});
    }
    if (last !== undefined && isTerminal(last.status)) return outcome(status, last);
    if (!timedOut && signal?.aborted) throw signal.reason;
    throw new RunTimeoutError(runId, last?.status ?? null, status, timeoutMs);
  }

  return {
    runId,
    flowSlug,
    waitFor: waitFor as FlowRun<F>["waitFor"],
    async state() {
      const state = await backend.getRun(runId);
      if (state === null) throw new RunNotFoundError(runId);
      return state as unknown as RunState<F>;
    },
    async *events({ signal }: EventsOptions = {}) {
      let previous: AnyRunState | undefined;
      const stop = signal ?? new AbortController().signal;
      for await (const state of watchRun(backend, runId, timing, stop)) {
        for (const event of eventsBetween(previous, state)) yield event as RunEvent<F>;
        previous = state;
      }
    },
  };
}

function outcome(awaited: "completed" | "failed" | "terminal", state: AnyRunState): unknown {
  if (awaited === "terminal") return state;
  if (awaited === "completed") {
    if (state.status === "completed") return state.output;
    const step = failedStep(state);
    throw new RunFailedError(
      state.runId,
      step?.stepSlug ?? null,
      step?.error ?? state.error ?? "no error was recorded",
    );
  }
  if (state.status === "failed") return state;
  throw new RunStatusError(state.runId, state.status, awaited);
}
