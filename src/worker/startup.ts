/**
 * A worker's startup, step by step: connect, check the engine schema, compile the definitions,
 * read the support set, register the worker row, open the wake-ups, and say "worker started". A
 * stop that comes meanwhile ends it at its next step, before any read.
 *
 * @module
 */
import { connectionProblem, withoutStack } from "../operations/connection_problem.ts";
import { maskError } from "../platform/database_url.ts";
import type { Logger } from "../platform/logger.ts";
import { pgMessage } from "../platform/pg_message.ts";
import type { WorkerEnv } from "../platform/env.ts";
import { prepareSupabaseClient } from "../platform/supabase_client.ts";
import { loadTelemetry } from "../telemetry/otel_loader.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { SupportedPair } from "../task/claim.ts";
import { queueSupportSet } from "../task/support.ts";
import { openWakeups, type WorkerWakeups } from "../task/wakeups.ts";
import { compileDefinitions, verifySchemaVersion } from "./compile_at_start.ts";
import type { ResolvedConfig } from "./config.ts";
import { WorkerStartupError } from "./errors.ts";
import type { ResolvedTarget } from "./target.ts";
import { connectWorker, type WorkerConnection } from "./worker_pool.ts";
import { registerWorker } from "./worker_row.ts";

/**
 * What a startup has set up so far, filled in step by step: what a stop or a failure must undo
 * (the LISTEN, the worker row, a pool the worker opened), whenever it comes.
 */
export interface Acquired {
  /** The pool, once connected. */
  db?: WorkerConnection;
  /** The exact pairs claimed, once read. */
  supported?: readonly SupportedPair[];
  /** Whether `register_worker` has answered: the row is then marked stopped at the end. */
  registered: boolean;
  /** The wake-ups, once opened. */
  wakeups?: WorkerWakeups;
}

/** What a startup needs to know of its worker. */
export interface StartupInput {
  readonly id: string;
  readonly queueName: string;
  readonly functionName: string;
  readonly config: ResolvedConfig;
  readonly env: WorkerEnv;
  readonly target: ResolvedTarget;
  readonly log: Logger;
  /** Checked between the steps: true ends the startup there. */
  readonly stopRequested: () => boolean;
}

/** A worker ready to poll: its pool, its support set and its handlers' Supabase client. */
export interface Ready {
  readonly sql: Sql;
  readonly supported: readonly SupportedPair[];
  readonly supabase: () => SupabaseClient;
}

/**
 * Runs the steps of a worker's startup, recording in `acquired` what each set up; resolves with
 * what the worker polls with, or `undefined` when a stop came first. Rejects with the first
 * step's error (`WorkerStartupError` where the cause is known).
 */
export async function startUp(acquired: Acquired, input: StartupInput): Promise<Ready | undefined> {
  const { config, log, target } = input;
  const timeoutMs = config.queryTimeoutMs;
  // Loaded (only where an SDK is registered) while the database steps wait on the server; the
  // first read must know whether spans are recorded.
  const telemetry = loadTelemetry();
  telemetry.catch(() => {}); // awaited below; a startup that fails first must not leave it unhandled
  const db = acquired.db = await connectWorker(config);
  const sql = db.sql;
  log.info("database connection", { ...db.connection, preparedStatements: db.prepared });
  if (input.stopRequested()) return undefined;
  await verifySchemaVersion(sql, log, timeoutMs);
  await compileDefinitions(sql, target.definitions, log, timeoutMs);
  if (input.stopRequested()) return undefined;
  const supported = acquired.supported = await resolveSupportSet(sql, target, timeoutMs);
  const supabase = await prepareSupabaseClient(input.env);
  if (input.stopRequested()) return undefined;
  // The support set is recorded with the worker so the coverage check can see what it serves.
  // The LISTEN opens on a connection of its own meanwhile: neither waits for the other, and both
  // are done before the first read.
  const registering = registerWorker(sql, input, supported, timeoutMs)
    .then(() => log.debug("worker registered", { pairs: supported.length }));
  const listening = openWakeups(
    sql,
    input.queueName,
    supported,
    config.wakeups,
    db.connection,
    log,
    timeoutMs,
  );
  const [registered, opened] = await Promise.allSettled([registering, listening]);
  // Recorded before any error is thrown, so that a failed startup still closes what it opened.
  if (opened.status === "fulfilled") acquired.wakeups = opened.value;
  if (registered.status === "rejected") throw registered.reason;
  acquired.registered = true;
  if (opened.status === "rejected") throw opened.reason;
  await telemetry;
  if (input.stopRequested()) return undefined;
  log.info("worker started", {
    function: input.functionName,
    supported: supported.map(([flow, step]) => `${flow}.${step}`),
    wakeups: opened.value.mode,
  });
  return { sql, supported, supabase };
}

/**
 * The error a failed startup rejects with: a `WorkerStartupError` as it was thrown, any other
 * error wrapped in one that names the queue; a database URL in it masked.
 */
export function startupFailure(
  error: unknown,
  queueName: string,
  connectionString: string | undefined,
): Error {
  if (error instanceof WorkerStartupError) return maskError(error, connectionString);
  const cannotStart = (reason: string) =>
    new WorkerStartupError(`worker for queue "${queueName}" could not start: ${reason}`);
  const unreachable = connectionProblem(error, connectionString);
  // An unreachable database is a setting to fix, which the message says: no stack.
  const failure = unreachable !== undefined
    ? withoutStack(cannotStart(unreachable))
    : cannotStart(pgMessage(error));
  return maskError(failure, connectionString);
}

/**
 * The worker's support set: the pairs of its flows the database routes to its queue (see
 * `queueSupportSet`). None is a startup error: such a worker would poll for nothing.
 */
async function resolveSupportSet(
  sql: Sql,
  target: ResolvedTarget,
  timeoutMs: number,
): Promise<readonly SupportedPair[]> {
  const supported = await queueSupportSet(sql, target.queue, target.flows, timeoutMs);
  if (supported.length === 0) {
    throw new WorkerStartupError(
      `no step of flow(s) ${
        target.flows.map((f) => `"${f.slug}"`).join(", ")
      } is routed to queue "${target.queue}" in the database; nothing to poll`,
    );
  }
  return Object.freeze(supported);
}
