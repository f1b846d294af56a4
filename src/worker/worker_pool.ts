/**
 * The pool a worker opens from its connection string. It can only tell what is between it and
 * Postgres once connected, so the pool starts without prepared statements (safe everywhere) and,
 * where they keep working, prepares from then on: one pool and one connection setup either way.
 *
 * @module
 */
import { createPool, startPreparing } from "../platform/pool.ts";
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
 * Opens the pool of `max` connections to `url`, describes its connection on the pool's first
 * one, and turns on prepared statements where `mode` wants them there. The pool is ended on
 * failure.
 */
export async function openWorkerPool(
  url: string,
  max: number,
  mode: PreparedStatementsMode,
  timeoutMs: number,
): Promise<WorkerPool> {
  const sql = createPool(url, { max, prepare: mode === "on" });
  let connection: ConnectionInfo;
  try {
    connection = await describeConnection(sql, url, timeoutMs);
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw error;
  }
  const prepared = preparesOn(mode, connection.kind);
  if (prepared && mode !== "on") startPreparing(sql);
  return { sql, connection, prepared };
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
