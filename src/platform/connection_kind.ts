import { parseDatabaseUrl } from "./database_url.ts";
import { bounded } from "./deadline.ts";
import type { Sql } from "./types.ts";

/**
 * What the worker could tell about its database connection.
 *
 * @example
 * ```ts
 * import type { ConnectionInfo } from "@pgflow/shared/tools";
 *
 * const info: ConnectionInfo = { kind: "transaction pooler", evidence: "pooler on port 6543" };
 * ```
 */
export interface ConnectionInfo {
  /**
   * `direct` (the server itself), `transaction pooler`, `session pooler`, or `pooler` when a
   * pooler is in between but its mode cannot be told.
   */
  readonly kind: "direct" | "transaction pooler" | "session pooler" | "pooler";
  /** How the kind was told, for the log line. */
  readonly evidence: string;
  /** The URL's host; absent for a pool given without its URL. */
  readonly host?: string;
  /** The URL's port. */
  readonly port?: number;
  /** The URL's database. */
  readonly database?: string;
  /** The URL's user (the password is never kept). */
  readonly user?: string;
}

/**
 * Tells what is between the worker and Postgres. A pooler answers the connection's startup with
 * a backend key of its own, so the key postgres.js received differs from `pg_backend_pid()`; the
 * pooler's mode is told from the URL (Supabase: port 6543 is Supavisor's transaction mode, port
 * 5432 on `*.pooler.supabase.com` its session mode). The worker behaves the same in every case:
 * this is for the startup log line and for operators.
 *
 * @example
 * ```ts
 * import { createPool } from "@pgflow/shared";
 * import { describeConnection } from "@pgflow/shared/tools";
 *
 * const url = "postgres://postgres@127.0.0.1:5432/postgres";
 * const sql = createPool(url);
 * // const info = await describeConnection(sql, url); // { kind: "direct", ... }
 * ```
 */
export async function describeConnection(
  sql: Sql,
  url: string | undefined,
  timeoutMs = 10_000,
): Promise<ConnectionInfo> {
  const parts = url === undefined ? {} : urlParts(url);
  const query = sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
  const [row] = await bounded(query, "pg_backend_pid", timeoutMs);
  const keyPid = (query as unknown as { state?: { pid?: number | null } }).state?.pid;
  if (keyPid === row.pid) {
    return { kind: "direct", evidence: "backend key matches pg_backend_pid()", ...parts };
  }
  const port = parts.port;
  const supabasePooler = parts.host?.endsWith(".pooler.supabase.com") ?? false;
  if (port === 6543) {
    return { kind: "transaction pooler", evidence: "pooler on port 6543", ...parts };
  }
  if (supabasePooler && port === 5432) {
    return { kind: "session pooler", evidence: "Supabase pooler on port 5432", ...parts };
  }
  return { kind: "pooler", evidence: "backend key differs from pg_backend_pid()", ...parts };
}

/**
 * Whether a connection of this kind keeps its server session for as long as it is open: a direct
 * connection or a session pooler's. Only such a connection keeps a LISTEN or a prepared
 * statement; a transaction pooler hands each transaction to any server connection, and a pooler
 * whose mode cannot be told is treated as one.
 *
 * @example
 * ```ts
 * import { ownsServerSession } from "@pgflow/shared/tools";
 *
 * ownsServerSession("direct"); // true
 * ownsServerSession("transaction pooler"); // false
 * ```
 */
export function ownsServerSession(kind: ConnectionInfo["kind"]): boolean {
  return kind === "direct" || kind === "session pooler";
}

function urlParts(url: string): Pick<ConnectionInfo, "host" | "port" | "database" | "user"> {
  const { host, port, database, user } = parseDatabaseUrl(url, "the connection's URL");
  return { host, port, database, user };
}
