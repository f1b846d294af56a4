import type { Env } from "../dsl/context.ts";
import { parseDatabaseUrl } from "../platform/database_url.ts";
import {
  DATABASE_URL_VARIABLES,
  databaseUrlSource,
  envUnreadable,
  type WorkerEnv,
} from "../platform/env.ts";
import { isLogLevel, type Logger, type LogLevel } from "../platform/logger.ts";
import type { Sql } from "../platform/types.ts";
import { WorkerConfigError } from "./errors.ts";
import type { WakeupMode } from "../task/wakeups.ts";
import { type NumericOptionName, WORKER_OPTIONS } from "./options.ts";

/**
 * Options of a worker. The queue is chosen separately (`queueName` for routed flows, `stepSlug`
 * for step-queued flows, nothing for a plain flow), see `WorkerSelection`.
 *
 * @example
 * ```ts
 * import type { EdgeWorkerConfig } from "@pgflow/shared";
 *
 * const config: EdgeWorkerConfig = { maxConcurrent: 4, maxPollSeconds: 2 };
 * ```
 */
export interface EdgeWorkerConfig {
  /** Handlers running at once; default 10. */
  readonly maxConcurrent?: number;
  /** Most messages one read asks for (it also never exceeds the free slots); default 10. */
  readonly batchSize?: number;
  /** Seconds a read reserves messages before the claim re-arms them; default 5. */
  readonly visibilityTimeout?: number;
  /**
   * Seconds one read may wait in the database for messages when the worker polls; with LISTEN
   * wake-ups, the longest an idle worker goes without reading (what no notification announces: a
   * retry after its delay, a message whose visibility timeout ran out). Default 2.
   */
  readonly maxPollSeconds?: number;
  /**
   * How often (ms) the database re-checks the queue while a read waits, when the worker polls;
   * default 50 (pickup p50 about half of it; an idle polling worker costs its database about 1% of
   * a core at 50, 0.8% at 100).
   */
  readonly pollIntervalMs?: number;
  /**
   * How the worker learns that work was sent to its queue. `listen`: LISTEN on the process's LISTEN
   * connection (one per process and database, beside the pools), woken by the notification sent
   * with the messages, and reading
   * every `maxPollSeconds` as a fallback; polling in the database while that connection is down.
   * `poll`: reads that wait in the database, re-checking every `pollIntervalMs`. Default `auto`:
   * `listen` on direct and session-pooler connections, `poll` behind a transaction pooler or a
   * pooler whose mode cannot be told (a transaction pooler does not keep a LISTEN).
   */
  readonly wakeups?: WakeupMode;
  /**
   * Whether the pool the worker opens from `connectionString` uses named prepared statements,
   * which make each of its queries one round trip instead of two. `on`, `off`, or `auto` (the
   * default): on for a direct or session-pooler connection, off behind a transaction pooler or a
   * pooler whose mode cannot be told (where a prepared statement would be missing on the next
   * server connection). Handlers' `context.sql` is that pool. No effect on a pool given as `sql`.
   */
  readonly preparedStatements?: PreparedStatementsMode;
  /** Pool size when the worker opens its own pool; default 4 (at least 2). */
  readonly maxPgConnections?: number;
  /** Postgres URL; else `sql`; else env `EDGE_WORKER_DB_URL`, then `DATABASE_URL`. */
  readonly connectionString?: string;
  /** A ready pool, made with `createPool` (safe behind a transaction pooler); never closed by the
   * worker. */
  readonly sql?: Sql;
  /** The function name recorded with the worker row (the deploy fence); default: the queue name. */
  readonly functionName?: string;
  /** The worker id (a UUID); default: `SB_EXECUTION_ID` when it is a UUID, else a random one. */
  readonly workerId?: string;
  /** Milliseconds between heartbeats; default 5000. */
  readonly heartbeatIntervalMs?: number;
  /** Milliseconds between stalled-task recovery passes (0 disables them); default 15000. */
  readonly stalledRecoveryIntervalMs?: number;
  /**
   * Milliseconds between passes firing the due ticks of schedules (`pgflow.fire_due_schedules()`),
   * so schedules run without pg_cron (0 disables them); default 1000. Every worker ticks; a tick
   * still starts one run.
   */
  readonly scheduleTickIntervalMs?: number;
  /**
   * Milliseconds any database call of the worker may go unanswered before it is abandoned and
   * its connection replaced; the poll gets `maxPollSeconds` × 1000 on top. Default 20000.
   */
  readonly queryTimeoutMs?: number;
  /**
   * Milliseconds between the `info` lines that sum up the worker's activity (tasks completed,
   * failed, retried, handler p50/p95) and report unclaimed messages, one per disposition, flow
   * and step; default 60000. Per-task success lines are `debug`.
   */
  readonly logSummaryIntervalMs?: number;
  /**
   * Milliseconds `stop()` waits for in-flight tasks (their handlers, told to finish through
   * `shutdownSignal`, and their reports) before it gives up on them, logs each one it abandons and
   * closes the pool; stalled recovery takes an abandoned task back once it has been started longer
   * than its step's timeout + 30 s. Default 30000.
   */
  readonly shutdownTimeoutMs?: number;
  /**
   * Largest task input, run input (`ctx.flowInput`) or handler output this worker takes or sends,
   * in bytes of JSON text; default 10,485,760 (10 MiB), at most 268,435,455 (what `jsonb` holds).
   * A larger one fails its task with a `PayloadTooLarge` error naming the size and the bound,
   * before the worker parses the input (it is left in the database) or sends the output, so one
   * large payload never ends the isolate. Parsed JSON takes up to about 10 times its text:
   * raise this only with the memory for it; keep large data in Storage and pass a reference.
   */
  readonly maxPayloadBytes?: number;
  /** Environment for handlers and for reading URLs and keys; default the process environment. */
  readonly env?: Env;
  /** Where logs go; default JSON lines at `EDGE_WORKER_LOG_LEVEL` (default `info`). */
  readonly logger?: Logger;
  /**
   * Whether a `task failed` line carries the first line of the error's message (`error`) when the
   * error came from the flow's code (its handler, its input schema). Default `false`: such text
   * often holds personal data ("mailbox ada@example.com unavailable"), so the line carries only
   * the error's kind, code and length; the whole text is in the attempt history either way.
   */
  readonly logErrorMessages?: boolean;
  /** Extra values merged into every handler context (the flow's custom context type). */
  readonly context?: { readonly [key: string]: unknown };
}

export type { WakeupMode };

/**
 * Whether the worker's own pool prepares its statements: `on`, `off`, or `auto` (see
 * `EdgeWorkerConfig.preparedStatements`).
 *
 * @example
 * ```ts
 * import type { PreparedStatementsMode } from "@pgflow/shared";
 *
 * const mode: PreparedStatementsMode = "off"; // e.g. behind a pooler that passes backend keys on
 * ```
 */
export type PreparedStatementsMode = "auto" | "on" | "off";

/** A config with every default applied and every value checked. */
export type ResolvedConfig = { readonly [K in NumericOptionName]: number } & {
  /** Exactly one of `sql` and `connectionString` is set. */
  readonly sql?: Sql;
  readonly connectionString?: string;
  readonly functionName?: string;
  readonly workerId?: string;
  readonly wakeups: WakeupMode;
  readonly preparedStatements: PreparedStatementsMode;
  readonly logLevel: LogLevel;
  readonly logger?: Logger;
  readonly logErrorMessages: boolean;
  readonly context?: { readonly [key: string]: unknown };
};

const KNOWN = new Set([
  ...Object.keys(WORKER_OPTIONS),
  "connectionString",
  "sql",
  "functionName",
  "workerId",
  "wakeups",
  "preparedStatements",
  "env",
  "logger",
  "logErrorMessages",
  "context",
  "queueName",
  "stepSlug",
]);

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** Whether `value` is a UUID in canonical text form. */
export function isUuid(value: string): boolean {
  return UUID.test(value);
}

/**
 * Applies defaults and checks every option, throwing a {@link WorkerConfigError} that names the
 * option, the value and the accepted range.
 */
export function resolveConfig(config: EdgeWorkerConfig, env: WorkerEnv): ResolvedConfig {
  if (config === null || typeof config !== "object" || Array.isArray(config)) {
    throw new WorkerConfigError(`worker config must be an object, got ${describe(config)}`);
  }
  for (const key of Object.keys(config)) {
    if (!KNOWN.has(key)) {
      throw new WorkerConfigError(
        `unknown worker option ${JSON.stringify(key)}; the options are ${[...KNOWN].join(", ")}`,
      );
    }
  }
  const numbers = Object.fromEntries(
    (Object.keys(WORKER_OPTIONS) as NumericOptionName[]).map((key) => [key, int(config, key)]),
  ) as { [K in NumericOptionName]: number };
  if (numbers.pollIntervalMs > numbers.maxPollSeconds * 1000) {
    throw new WorkerConfigError(
      `pollIntervalMs (${numbers.pollIntervalMs}) must not exceed maxPollSeconds ` +
        `(${numbers.maxPollSeconds}) × 1000, or the read would never look again while it waits`,
    );
  }
  if (config.sql !== undefined && config.connectionString !== undefined) {
    throw new WorkerConfigError(
      "give either sql (a ready pool) or connectionString, not both",
    );
  }
  if (config.sql !== undefined && typeof config.sql !== "function") {
    // Named by its type only: a string here is most likely a URL, with its password.
    throw new WorkerConfigError(
      `sql must be a postgres.js pool (made with createPool), got ${
        typeof config.sql === "string"
          ? "a string (a URL goes in connectionString)"
          : describe(config.sql)
      }`,
    );
  }
  if (config.sql !== undefined && config.maxPgConnections !== undefined) {
    throw new WorkerConfigError(
      "maxPgConnections sizes a pool the worker opens itself; with sql, size that pool instead",
    );
  }
  let connectionString: string | undefined;
  if (config.sql === undefined) {
    const fromEnv = databaseUrlSource(env);
    connectionString = config.connectionString ?? fromEnv?.url;
    if (connectionString === undefined) {
      const unreadable = config.env === undefined ? envUnreadable(DATABASE_URL_VARIABLES) : [];
      throw new WorkerConfigError(
        unreadable.length > 0
          ? `no database: this process may not read ${unreadable.join(" or ")} (Deno's ` +
            `--allow-env is missing): run it with --allow-env (or -A), or set connectionString ` +
            `or sql in the worker config`
          : "no database: set connectionString or sql in the worker config, or EDGE_WORKER_DB_URL " +
            "or DATABASE_URL in the environment",
      );
    }
    try {
      // Checked now, so a bad URL fails at once with the part named and the password masked,
      // not as the pool's "Invalid URL" (which echoes it) or after connect attempts.
      parseDatabaseUrl(
        connectionString,
        config.connectionString === undefined ? fromEnv!.variable : "connectionString",
      );
    } catch (error) {
      throw new WorkerConfigError((error as Error).message);
    }
  }
  const functionName = config.functionName;
  if (
    functionName !== undefined &&
    (typeof functionName !== "string" || !/^[A-Za-z0-9_-]{1,128}$/.test(functionName))
  ) {
    throw new WorkerConfigError(
      `functionName must be 1-128 letters, digits, "_" or "-", got ${describe(functionName)}`,
    );
  }
  if (
    config.workerId !== undefined &&
    !(typeof config.workerId === "string" && isUuid(config.workerId))
  ) {
    throw new WorkerConfigError(`workerId must be a UUID, got ${describe(config.workerId)}`);
  }
  if (
    config.context !== undefined &&
    (config.context === null || typeof config.context !== "object" || Array.isArray(config.context))
  ) {
    throw new WorkerConfigError(`context must be an object, got ${describe(config.context)}`);
  }
  const wakeups = config.wakeups ?? "auto";
  if (wakeups !== "auto" && wakeups !== "listen" && wakeups !== "poll") {
    throw new WorkerConfigError(
      `wakeups must be "auto", "listen" or "poll", got ${describe(wakeups)}`,
    );
  }
  const preparedStatements = config.preparedStatements ?? "auto";
  if (
    preparedStatements !== "auto" && preparedStatements !== "on" && preparedStatements !== "off"
  ) {
    throw new WorkerConfigError(
      `preparedStatements must be "auto", "on" or "off", got ${describe(preparedStatements)}`,
    );
  }
  const logErrorMessages = config.logErrorMessages ?? false;
  if (typeof logErrorMessages !== "boolean") {
    throw new WorkerConfigError(
      `logErrorMessages must be true or false, got ${describe(logErrorMessages)}`,
    );
  }
  const level = env.EDGE_WORKER_LOG_LEVEL ?? "info";
  if (!isLogLevel(level)) {
    throw new WorkerConfigError(
      `EDGE_WORKER_LOG_LEVEL must be error, warn, info or debug, got "${level}"`,
    );
  }
  return Object.freeze({
    ...numbers,
    sql: config.sql,
    connectionString,
    functionName,
    workerId: config.workerId,
    wakeups,
    preparedStatements,
    logLevel: level,
    logger: config.logger,
    logErrorMessages,
    context: config.context,
  });
}

function int(config: EdgeWorkerConfig, key: NumericOptionName): number {
  const { default: fallback, min, max } = WORKER_OPTIONS[key];
  const value = config[key];
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new WorkerConfigError(
      `${key} must be an integer from ${min} to ${max}, got ${describe(value)}`,
    );
  }
  return value;
}

function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) {
    return String(value);
  }
  return Array.isArray(value) ? "an array" : `a ${typeof value}`;
}
