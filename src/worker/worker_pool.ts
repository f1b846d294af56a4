/**
 * The pool a worker opens from its connection string. It can only tell what is between it and
 * Postgres once connected, and postgres.js fixes `prepare` when a pool is made, so the first pool
 * (no prepared statements: safe everywhere) describes the connection and, where prepared
 * statements keep working, gives way to one that prepares.
 *
 * @module
 */
import { createPool } from "../platform/pool.ts";
import {
  type ConnectionInfo,
  describeConnection,
  ownsServerSession,
} from "../platform/connection_kind.ts";
import type { Sql } from "../platform/types.ts";
import type { PreparedStatementsMode } from "./config.ts";

/** The worker's pool, what it is connected through, and whether it prepares its statements. */
export interface WorkerPool {
  readonly sql: Sql;
  readonly connection: ConnectionInfo;
  readonly prepared: boolean;
}

/** Whether `mode` prepares statements on a connection of `kind`. */
export function preparesOn(mode: PreparedStatementsMode, kind: ConnectionInfo["kind"]): boolean {
  return mode === "on" || (mode === "auto" && ownsServerSession(kind));
}

/**
 * Opens the pool of `max` connections to `url` and describes its connection. The describing
 * pool is ended when a preparing one replaces it, and on failure.
 */
export async function openWorkerPool(
  url: string,
  max: number,
  mode: PreparedStatementsMode,
  timeoutMs: number,
): Promise<WorkerPool> {
  const firstPrepares = mode === "on";
  const first = createPool(url, { max, prepare: firstPrepares });
  let connection: ConnectionInfo;
  try {
    connection = await describeConnection(first, url, timeoutMs);
  } catch (error) {
    await first.end({ timeout: 1 }).catch(() => {});
    throw error;
  }
  const prepared = preparesOn(mode, connection.kind);
  if (prepared === firstPrepares) return { sql: first, connection, prepared };
  await first.end({ timeout: 1 }).catch(() => {});
  return { sql: createPool(url, { max, prepare: true }), connection, prepared };
}

/** A worker's database: its pool, what it is connected through, and whether the worker owns it. */
export interface WorkerConnection extends Omit<WorkerPool, "prepared"> {
  /** Whether the worker opened the pool (and so ends it when it stops). */
  readonly owned: boolean;
  /** Whether its statements are prepared; unknown for a pool the worker was given. */
  readonly prepared?: boolean;
}

/**
 * The pool of a worker's config: the one given as `sql`, described, or one opened from
 * `connectionString` (safe behind a transaction pooler: no request pipelined behind an
 * unanswered Sync, see docs/connections.md, and prepared statements only where the server
 * session stays the worker's).
 */
export async function connectWorker(config: {
  readonly sql?: Sql;
  readonly connectionString?: string;
  readonly maxPgConnections: number;
  readonly preparedStatements: PreparedStatementsMode;
  readonly queryTimeoutMs: number;
}): Promise<WorkerConnection> {
  const timeoutMs = config.queryTimeoutMs;
  if (config.sql !== undefined) {
    const connection = await describeConnection(config.sql, config.connectionString, timeoutMs);
    return { sql: config.sql, connection, owned: false };
  }
  const pool = await openWorkerPool(
    config.connectionString!,
    config.maxPgConnections,
    config.preparedStatements,
    timeoutMs,
  );
  return { ...pool, owned: true };
}
