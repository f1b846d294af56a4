/**
 * A handle on one run: wait for it, watch its events, read its state.
 *
 * @module
 */
import type { FlowCarrier } from "../dsl/extract.ts";
import { type Backend, isTransient, NO_SUCH_RUN } from "./backend.ts";
import { eventsBetween } from "./diff.ts";
import {
  ClientClosedError,
  RunActionError,
  RunCancelledError,
  RunError,
  RunFailedError,
  RunFlowMismatchError,
  RunNotFoundError,
  RunStatusError,
  RunTimeoutError,
  StartFlowError,
} from "./errors.ts";
import { checkedInput, type KnownFlows } from "./known_flows.ts";
import { checkEventsOptions, checkRestartOptions, resolveWaitOptions } from "./options.ts";
import { type AnyRunState, failedStep, isTerminal } from "./snapshot.ts";
import type {
  CancelResult,
  FlowInputOf,
  FlowOutputOf,
  RestartMode,
  RunEvent,
  RunState,
  RunStatus,
} from "./types.ts";
import { watchRun, type WatchTiming } from "./watch.ts";

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
  /**
   * Reject with `RunTimeoutError` after this many milliseconds, 1 to 2,147,483,647 (the longest
   * timer); default 300,000 (5 minutes).
   */
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
 * Options of `run.retry` and `run.resume`.
 *
 * @example
 * ```ts
 * import type { RestartOptions } from "@pgflow/shared";
 *
 * // Restart the run only if nobody retried or resumed it yet.
 * const once: RestartOptions = { again: false };
 * ```
 */
export interface RestartOptions {
  /**
   * Whether a run that was retried or resumed already is restarted once more (default `true`:
   * every call starts one more run). With `false` such a run is refused with `RunActionError`
   * (`code` `23505`, its message naming the run made from it); two such calls at once restart it
   * once.
   */
  readonly again?: boolean;
}

/**
 * Options of `run.retry`: those of any restart, and the input of the new run.
 *
 * @example
 * ```ts
 * import type { RetryOptions } from "@pgflow/shared";
 *
 * // The run failed on a wrong address: run it again with the address corrected.
 * const corrected: RetryOptions = { input: { orderId: 7, address: "1 Main St" } };
 * ```
 */
export interface RetryOptions<F extends FlowCarrier = never> extends RestartOptions {
  /**
   * The new run's input instead of the source's (say, corrected after the run failed on it). It
   * must pass the flow's input schema when the client was given the flow (`flows`); the worker
   * checks it anyway. The new run is linked to the source as any retry is.
   */
  readonly input?: FlowInputOf<F>;
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
  /** The flow it runs (`""` for `client.run(runId)` without a slug). */
  readonly flowSlug: string;
  /**
   * Resolves with the run's output once it completed; rejects with `RunFailedError` (naming the
   * failing step, its error and its attempts) when it failed, `RunCancelledError` (with the reason
   * and time) when it was cancelled, `RunTimeoutError` when it is still running after
   * `timeoutMs`, `RunNotFoundError` when there is no such run.
   *
   * Every `waitFor` also rejects with `RunFlowMismatchError` when the handle names another flow
   * than the run's, and with `ClientClosedError` as soon as the client is closed (or once the pool
   * it was given is found ended).
   */
  waitFor(status: "completed", options?: WaitForOptions): Promise<FlowOutputOf<F>>;
  /**
   * Resolves with the run's state once it failed; rejects with `RunStatusError` when it completed
   * instead, `RunCancelledError` when it was cancelled, `RunTimeoutError` after `timeoutMs`.
   */
  waitFor(status: "failed", options?: WaitForOptions): Promise<RunState<F>>;
  /**
   * Resolves with the run's state once it completed, failed or was cancelled; `RunTimeoutError`
   * after `timeoutMs`.
   */
  waitFor(status: "terminal", options?: WaitForOptions): Promise<RunState<F>>;
  /**
   * The run's current state (`RunNotFoundError` when there is no such run, `RunFlowMismatchError`
   * when it is of another flow than the handle's, `ClientClosedError` once the client is closed).
   */
  state(): Promise<RunState<F>>;
  /**
   * The run's events in order, from its start (a late subscriber gets what already happened
   * first), ending after `run:completed`, `run:failed` or `run:cancelled`.
   *
   * `client.close()` ends an iteration under way at once, without an error, as aborting `signal`
   * does (so a server shutting down can finish its responses); the last event is then not a
   * `run:*` end. Iterating on a client closed already throws `ClientClosedError`, and so does an
   * iteration whose pool (given as `sql`) was ended. A handle of another flow than the run's throws
   * `RunFlowMismatchError`.
   */
  events(options?: EventsOptions): AsyncIterableIterator<RunEvent<F>>;
  /**
   * Cancels the run (`pgflow.cancel_run`): a started run ends `cancelled` with `reason` and the
   * time, none of its tasks is claimed or started any more, and its handlers' `signal` fires.
   * Resolves with what happened: `cancelled: true`, or `false` with the terminal `status` it had
   * already (never a rejection for that). Rejects with `RunNotFoundError` for an unknown run and
   * `RunActionError` when the database refuses (say, `42501`: the role may not cancel).
   */
  cancel(reason?: string): Promise<CancelResult>;
  /**
   * Starts a new run of the same flow with the same input (`pgflow.retry_run`) and returns its
   * handle; this run is left as it is, and the new one records it as `restartOfRunId`. Only a
   * failed or cancelled run: otherwise `RunActionError` (`code` `55000`, `status` says what it
   * is); `RunNotFoundError` for an unknown run. It starts the same concrete flow, never the
   * current target of an alias. `{ again: false }` refuses a run restarted already; `{ input }`
   * starts it with another input (checked by the flow's schema when the client was given the
   * flow: `InputValidationError`, and no run is made).
   */
  retry(options?: RetryOptions<F>): Promise<FlowRun<F>>;
  /**
   * Like `retry`, but the new run reuses every task that completed in this one (whole steps, and
   * single tasks of a map), and every skip a completed step was built on, and runs only the rest
   * (`pgflow.resume_run`); reused steps have `reused: true`.
   */
  resume(options?: RestartOptions): Promise<FlowRun<F>>;
}

/**
 * Makes a handle on run `runId`. A `flowSlug` other than `""` is checked against every reading of
 * the run; `closed` aborts when the client closes.
 */
export function runHandle<F extends FlowCarrier>(
  backend: Backend,
  runId: string,
  flowSlug: string,
  timing: WatchTiming,
  closed: AbortSignal,
  known: KnownFlows,
): FlowRun<F> {
  const reader = flowSlug === "" ? backend : checkingFlow(backend, flowSlug);
  const closedError = (action: string, cause?: unknown) =>
    new ClientClosedError("closed", `${action} on run ${runId}`, runId, { cause });

  async function waitFor(
    status: "completed" | "failed" | "terminal",
    options?: WaitForOptions,
  ): Promise<unknown> {
    const { timeoutMs, signal } = resolveWaitOptions(options);
    signal?.throwIfAborted();
    if (closed.aborted) throw closedError("waitFor");
    // Whichever stops the wait first decides how it ends.
    let why: "timeout" | "signal" | "closed" | undefined;
    const stop = new AbortController();
    const stopFor = (reason: "timeout" | "signal" | "closed") => () => {
      why ??= reason;
      stop.abort();
    };
    const stopped = new Promise<"stopped">((resolve) =>
      stop.signal.addEventListener("abort", () => resolve("stopped"), { once: true })
    );
    const onAbort = stopFor("signal");
    const onClose = stopFor("closed");
    signal?.addEventListener("abort", onAbort, { once: true });
    closed.addEventListener("abort", onClose, { once: true });
    const timer = setTimeout(stopFor("timeout"), timeoutMs);
    const readings = watchRun(reader, runId, timing, stop.signal);
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
    } catch (error) {
      if (closed.aborted) throw closedError("waitFor", error);
      throw error;
    } finally {
      clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
      closed.removeEventListener("abort", onClose);
      stop.abort();
      readings.return(undefined).catch(() => {});
    }
    if (last !== undefined && isTerminal(last.status)) return outcome(status, last);
    if (why === "closed") throw closedError("waitFor");
    if (why === "signal") throw signal!.reason;
    throw new RunTimeoutError(runId, last?.status ?? null, status, timeoutMs);
  }

  /** Runs `act`, turning the database's refusals into the client's errors. */
  async function acting<T>(
    action: "cancel" | "retry" | "resume",
    act: () => Promise<T>,
  ): Promise<T> {
    if (closed.aborted) throw closedError(action);
    try {
      // A handle that names a flow acts only on a run of that flow: a mistyped id is not acted on.
      if (flowSlug !== "" && await reader.getRun(runId) === null) {
        throw new RunNotFoundError(runId);
      }
      return await act();
    } catch (error) {
      if (closed.aborted) throw closedError(action, error);
      if (
        error instanceof RunError || error instanceof ClientClosedError ||
        error instanceof StartFlowError // a retry's input that failed its schema
      ) throw error;
      const e = error as { code?: string; message?: string };
      if (e.code === NO_SUCH_RUN) throw new RunNotFoundError(runId);
      if (isTransient(error)) throw error; // a lost connection is not a refusal
      throw new RunActionError(
        action,
        runId,
        statusIn(e.message),
        e.message ?? String(error),
        e.code,
        { cause: error },
      );
    }
  }

  async function restart(mode: RestartMode, options?: RetryOptions<F>): Promise<FlowRun<F>> {
    const { again, input } = checkRestartOptions(mode, options);
    const next = await acting(mode, async () => {
      const text = input === null ? null : await checkedRetryInput(options!.input, input);
      return await backend.restartRun(runId, mode, again, text);
    });
    return runHandle<F>(backend, next.runId, next.flowSlug, timing, closed, known);
  }

  /**
   * A retry's new input (`value`, as JSON `text`), checked by the schema of the run's flow when
   * the client knows that flow: the schema's value then.
   */
  async function checkedRetryInput(value: unknown, text: string): Promise<string> {
    if (known.empty) return text;
    const slug = flowSlug !== "" ? flowSlug : (await reader.getRun(runId))?.flowSlug;
    const flow = slug === undefined ? undefined : known.bySlug(slug);
    if (flow?.inputSchema === undefined) return text;
    return JSON.stringify(await checkedInput(flow, flow.slug, value));
  }

  return {
    runId,
    flowSlug,
    waitFor: waitFor as FlowRun<F>["waitFor"],
    cancel(reason?: string): Promise<CancelResult> {
      if (reason !== undefined && typeof reason !== "string") {
        return Promise.reject(
          new TypeError(`cancel: the reason must be a string, got ${typeof reason}`),
        );
      }
      return acting("cancel", () => backend.cancelRun(runId, reason ?? null));
    },
    retry: (options?: RetryOptions<F>) => restart("retry", options),
    resume: (options?: RestartOptions) => restart("resume", options),
    async state() {
      if (closed.aborted) throw closedError("state");
      let state;
      try {
        state = await reader.getRun(runId);
      } catch (error) {
        if (closed.aborted) throw closedError("state", error);
        throw error;
      }
      if (state === null) throw new RunNotFoundError(runId);
      return state as unknown as RunState<F>;
    },
    async *events(options?: EventsOptions) {
      const { signal } = checkEventsOptions(options);
      if (closed.aborted) throw closedError("events");
      // Ends on the caller's signal or the client's close, whichever comes first.
      const stop = new AbortController();
      const onStop = () => stop.abort();
      signal?.addEventListener("abort", onStop, { once: true });
      closed.addEventListener("abort", onStop, { once: true });
      if (signal?.aborted) stop.abort();
      try {
        let previous: AnyRunState | undefined;
        for await (const state of watchRun(reader, runId, timing, stop.signal)) {
          for (const event of eventsBetween(previous, state)) yield event as RunEvent<F>;
          previous = state;
        }
      } finally {
        signal?.removeEventListener("abort", onStop);
        closed.removeEventListener("abort", onStop);
      }
    },
  };
}

/** `backend`, whose readings of a run of another flow than `flowSlug` are refused. */
function checkingFlow(backend: Backend, flowSlug: string): Backend {
  return {
    ...backend,
    async getRun(runId) {
      const state = await backend.getRun(runId);
      if (state !== null && state.flowSlug !== flowSlug) {
        throw new RunFlowMismatchError(runId, state.status, state.flowSlug, flowSlug);
      }
      return state;
    },
  };
}

/** The status a refusal names ("run … is started; only failed or cancelled runs …"). */
function statusIn(message: string | undefined): RunStatus | null {
  const found = /\bis (started|completed|failed|cancelled)\b/.exec(message ?? "")?.[1];
  return (found as RunStatus | undefined) ?? null;
}

function outcome(awaited: "completed" | "failed" | "terminal", state: AnyRunState): unknown {
  if (awaited === "terminal") return state;
  if (state.status === "cancelled") {
    throw new RunCancelledError(state.runId, state.cancelReason, state.cancelledAt);
  }
  if (awaited === "completed") {
    if (state.status === "completed") return state.output;
    const step = failedStep(state);
    throw new RunFailedError(
      state.runId,
      step?.stepSlug ?? null,
      step?.error ?? state.error ?? "no error was recorded",
      step?.attempts ?? [],
    );
  }
  if (state.status === "failed") return state;
  throw new RunStatusError(state.runId, state.status, awaited);
}
