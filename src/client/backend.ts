/**
 * What the client needs from a database connection, whatever it is: start a run, read a run, and
 * a source of wake-ups that says when to read again.
 *
 * @module
 */
import { ClientClosedError, RunError } from "./errors.ts";
import type { CallSchedule } from "./schedules.ts";
import type { AnyRunState } from "./snapshot.ts";
import type {
  CancelResult,
  QueueWaitingTasks,
  RestartMode,
  RunStatus,
  RunSummary,
} from "./types.ts";

/** A subscription to a run's wake-ups; `close` ends it. */
export interface Subscription {
  close(): Promise<void>;
}

/**
 * Says when a run may have changed. Push transports (LISTEN, Supabase Realtime) call `wake` on a
 * notification and when their connection is back after a loss (what happened meanwhile was not
 * announced); the poll transport never does, and the watcher reads on a timer instead.
 */
export interface WakeSource {
  /** `listen`, `realtime` or `poll`. */
  readonly name: "listen" | "realtime" | "poll";
  /** Whether wake-ups are pushed (else the watcher polls). */
  readonly pushes: boolean;
  /** Subscribes to `runId`'s wake-ups; rejects when the subscription could not be made. */
  subscribe(runId: string, wake: () => void): Promise<Subscription>;
  /** Ends every subscription and connection the source holds. */
  close(): Promise<void>;
}

/** What a start returned: the run id, or that a run with the given id exists already. */
export type StartResult =
  /** Started: its id and its concrete flow (the target when started through an alias). */
  | { readonly runId: string; readonly flowSlug: string }
  | { readonly exists: true };

/** What a bulk start returned: the new runs' ids in input order, and the flow they run. */
export interface StartManyResult {
  readonly runIds: readonly string[];
  /** The concrete flow (the target when started through an alias). */
  readonly flowSlug: string;
}

/** The filters of `pgflow.list_runs`, checked already (`null`: not filtered on). */
export interface RunFilter {
  readonly flowSlug: string | null;
  readonly status: RunStatus | null;
  /** An ISO time. */
  readonly since: string | null;
  readonly runIdPrefix: string | null;
  /** 1 to 1000. */
  readonly limit: number;
  /** Only runs restarted already (`true`), only runs never restarted (`false`), or both. */
  readonly restarted: boolean | null;
}

/** The run a retry or resume started. */
export interface RestartedRun {
  readonly runId: string;
  readonly flowSlug: string;
}

/** SQLSTATE of `pgflow.cancel_run`, `retry_run` and `resume_run` for an unknown run. */
export const NO_SUCH_RUN = "P0002";

/** A database the client talks to: postgres.js (`sql`) or supabase-js (`rpc`). */
export interface Backend {
  /**
   * Starts a run of `flowSlug` (with `runId` when given) at `priority`, in the trace of
   * `traceparent` when given (docs/telemetry.md).
   */
  startFlow(
    flowSlug: string,
    input: string,
    runId: string | null,
    priority: number,
    traceparent: string | null,
  ): Promise<StartResult>;
  /**
   * Starts one run of `flowSlug` per element of `inputs` (the text of a JSON array) in one call
   * (`pgflow.start_flows`), at `priority`, in the trace of `traceparent` when given.
   */
  startFlows(
    flowSlug: string,
    inputs: string,
    priority: number,
    traceparent: string | null,
  ): Promise<StartManyResult>;
  /** Reads a run (`null`: no such run, or not readable). */
  getRun(runId: string): Promise<AnyRunState | null>;
  /** Cancels a run (`pgflow.cancel_run`); rejects with the database's error (`P0002`: unknown). */
  cancelRun(runId: string, reason: string | null): Promise<CancelResult>;
  /**
   * Retries or resumes a run (`pgflow.retry_run`, `resume_run`); the new run. `again: false`
   * refuses a run restarted already (`23505`). `input` (JSON text; retry only) replaces the
   * source's input; `null` keeps it.
   */
  restartRun(
    runId: string,
    mode: RestartMode,
    again: boolean,
    input: string | null,
  ): Promise<RestartedRun>;
  /** Where alias `alias` points now; `null` when there is no such alias. */
  aliasTarget(alias: string): Promise<string | null>;
  /**
   * Sends an event (`pgflow.send_event`); `payload` is JSON text. Its document, untouched: no
   * payload comes back in it.
   */
  sendEvent(call: SendEventCall): Promise<SendEventDocument>;
  /** Lists runs, newest first (`pgflow.list_runs`). */
  listRuns(filter: RunFilter): Promise<RunSummary[]>;
  /** Tasks waiting for capacity on `queue` (every queue: `null`), per `(scope, key)`. */
  waitingTasks(queue: string | null): Promise<QueueWaitingTasks[]>;
  /** Calls one schedule function (`pgflow.create_schedule` …) with named arguments; its result. */
  callSchedule: CallSchedule;
  /** Where wake-ups come from (decided on first use: it may need to look at the connection). */
  wakeSource(): Promise<WakeSource>;
  /** Ends what the client opened itself (never a pool it was given). */
  close(): Promise<void>;
}

/**
 * postgres.js's code for a query on a pool after `sql.end()`: that pool never connects again (a
 * lost connection is `CONNECTION_CLOSED`, and is retried).
 */
export const POOL_ENDED = "CONNECTION_ENDED";

/**
 * Whether a failed read may succeed when tried again: connection loss, a server shutting down or
 * starting, too many connections, a call that timed out. Errors the database raised about the
 * query itself (permission denied, bad input), the client's own errors about the run, and a pool
 * that was ended (postgres.js `CONNECTION_ENDED`: it never opens a connection again) are final.
 */
export function isTransient(error: unknown): boolean {
  if (error instanceof RunError || error instanceof ClientClosedError) return false;
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code === "string" && code.startsWith("PGRST")) return false; // the API refused it
  if (code === POOL_ENDED) return false;
  if (typeof code !== "string" || !/^[0-9A-Z]{5}$/.test(code)) return true;
  return /^(08|53|57)/.test(code);
}

/** The arguments of one `pgflow.send_event` call. */
export interface SendEventCall {
  readonly event: string;
  /** The payload as JSON text (postgres.js sends it as is). */
  readonly payload: string;
  /** The payload as given (supabase-js serialises it itself). */
  readonly value: unknown;
  readonly runId: string | null;
  readonly stepSlug: string | null;
  readonly key: string | null;
  readonly keepSeconds: number;
}

/** `pgflow.send_event`'s document. */
export interface SendEventDocument {
  readonly event: string;
  readonly results: {
    run_id: string | null;
    step_slug: string | null;
    status: "delivered" | "kept" | "ignored" | "refused";
    reason?: string;
    keep_until?: string;
  }[];
}
