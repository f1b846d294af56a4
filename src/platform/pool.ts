import postgres from "npm:postgres@3.4.7";
import { maskError, parseDatabaseUrl } from "./database_url.ts";
import { guardSql } from "./guarded_sql.ts";
import type { Sql } from "./types.ts";
import { GatedSocket, type SslSetting } from "./wire_gate.ts";
import { installTypeFetchGuard } from "./type_fetch_guard.ts";
import { parseJson, parseJsonb } from "../util/json_parse.ts";

/**
 * Options of {@link createPool}. Everything else (the socket, the reconnect backoff) is the pool's
 * own, because it is what keeps the pool safe behind a transaction pooler.
 *
 * @example
 * ```ts
 * import type { PoolOptions } from "@pgflow/shared";
 *
 * const options: PoolOptions = { max: 4, ssl: "require", application_name: "pgflow-worker" };
 * ```
 */
export interface PoolOptions {
  /** Most connections; default 10. */
  readonly max?: number;
  /** TLS as libpq's `sslmode`, or explicit options; default: the URL's `sslmode`, else none. */
  readonly ssl?: SslSetting | "disable";
  /** Seconds a connection may stay idle before it is closed; default: never. */
  readonly idle_timeout?: number;
  /** Seconds a connection lives at most; default: 30 to 60 minutes, at random. */
  readonly max_lifetime?: number;
  /** Seconds to wait for a connection to be established; default 10. */
  readonly connect_timeout?: number;
  /** Shown in `pg_stat_activity`; default `postgres.js`. */
  readonly application_name?: string;
  /**
   * Named prepared statements: each query text is parsed and described once per connection, and
   * every later run is one round trip instead of two (postgres.js describes an unprepared
   * query's parameters before it binds them). Default `false`, the only setting a transaction
   * pooler allows (it hands each transaction to any server connection, where the statement does
   * not exist). Turn it on only for a connection that keeps its server session: a direct one or
   * a session pooler's (see `ownsServerSession`).
   */
  readonly prepare?: boolean;
  /** Receives server notices; default: ignored. */
  readonly onnotice?: (notice: { readonly [field: string]: unknown }) => void;
}

/**
 * Opens a postgres.js pool that is safe behind a transaction-mode pooler (Supavisor on port 6543,
 * PgBouncer in `pool_mode = transaction`), a session pooler and a direct connection alike:
 *
 * - no prepared statements unless `prepare` is set (a transaction pooler hands each transaction
 *   to any server connection);
 * - a connection never carries a message of the next request while an earlier Sync is
 *   unanswered, whatever queries run on it (see `GatedSocket` and `docs/connections.md`);
 * - a query with an `undefined` parameter is rejected before it is sent (postgres.js would
 *   otherwise fail the query running before it and never send it: see `guardSql`);
 * - `json` and `jsonb` values are read by `parseJson`, not `JSON.parse` alone: every key as
 *   stored (V8's `JSON.parse` can read an escaped key as another one) and every number exact (one
 *   a JavaScript number cannot hold comes as an `ExactNumber`, never rounded);
 * - connects time out after 10 s instead of 30 s, and reconnects wait at most 2 s (not 20 s).
 *
 * Use it for the `sql` option of a worker when you bring your own pool; the worker opens one like
 * this itself from `connectionString`. Handlers get the worker's pool as `context.sql`.
 *
 * A URL that cannot be used (another scheme, no host or several, a port outside 1-65535, a bad
 * percent-escape, an unknown `sslmode`) throws a `DatabaseUrlError` naming the part, with the
 * password masked.
 *
 * @example
 * ```ts
 * import { createPool } from "@pgflow/shared";
 *
 * const sql = createPool("postgres://postgres.ref:secret@aws-0-eu-central-1.pooler.supabase.com:6543/postgres", { max: 4 });
 * // await sql`select 1`; ... await sql.end();
 * ```
 */
export function createPool(connectionString: string, options: PoolOptions = {}): Sql {
  installTypeFetchGuard(); // postgres.js 3.4.7 would end the process: see type_fetch_guard.ts
  // Checked first: `new URL` and postgres.js echo a URL they refuse, password and all.
  const { host, port, sslmode } = parseDatabaseUrl(connectionString, "the connection string");
  const url = new URL(connectionString.trim());
  const ssl = sslSetting(options.ssl ?? sslmode);
  // postgres.js must not negotiate TLS itself: a gate below TLS would see only ciphertext,
  // so the socket does TLS and hands postgres.js the plaintext stream.
  url.searchParams.delete("sslmode");
  url.searchParams.delete("ssl");
  const { ssl: _ssl, application_name, prepare = false, ...rest } = options;
  // `socket` is a postgres.js option its type declarations leave out.
  const owned = { prepare, ssl: false, socket: () => new GatedSocket({ host, port, ssl }) };
  try {
    return guardSql(postgres(url.toString(), {
      onnotice: () => {},
      connect_timeout: 10,
      // postgres.js waits up to 20 s between reconnects after repeated failures; a worker that
      // waits that long after a pooler restart holds its tasks for nothing. At most 2 s, jittered.
      backoff: (retries: number) => Math.min(2, 0.05 * 2 ** retries) * (0.5 + Math.random() / 2),
      ...rest,
      types: EXACT_JSON,
      ...(application_name === undefined ? {} : { connection: { application_name } }),
      ...owned as postgres.Options<Record<string, postgres.PostgresType>>,
    }));
  } catch (error) {
    throw maskError(error, connectionString);
  }
}

/**
 * Makes `sql` (a pool from {@link createPool} with `prepare` off) prepare every query built from
 * now on, on the connections it already has and on those it opens later. A worker can only tell
 * a direct connection from a pooler once connected; turning preparing on afterwards keeps that
 * first connection, where opening a second pool to prepare would cost a connection setup at
 * every start. postgres.js reads `options.prepare` (its public `sql.options`) each time it builds
 * a query, so statements already sent unnamed stay so and are not prepared behind a transaction
 * pooler: only call this for a connection that keeps its server session (`ownsServerSession`).
 *
 * @example
 * ```ts
 * import { createPool, startPreparing } from "./pool.ts";
 *
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres");
 * // after telling that the connection is direct:
 * startPreparing(sql);
 * ```
 */
export function startPreparing(sql: Sql): void {
  (sql as unknown as { options: { prepare: boolean } }).options.prepare = true;
}

/**
 * postgres.js's own `json` and `jsonb` types (written with `JSON.stringify`, as postgres.js does),
 * read with `parseJson` and `parseJsonb`. Arrays of them (`jsonb[]`) use them too.
 */
const EXACT_JSON = {
  json: {
    to: 114,
    from: [114],
    serialize: (value: unknown) => JSON.stringify(value),
    parse: parseJson,
  },
  jsonb: {
    to: 3802,
    from: [3802],
    serialize: (value: unknown) => JSON.stringify(value),
    parse: parseJsonb,
  },
};

function sslSetting(value: string | SslSetting | undefined): SslSetting {
  if (value === undefined || value === false || value === "disable") return false;
  if (typeof value === "object") return value;
  switch (value) {
    case "prefer":
    case "allow":
    case "require":
    case "verify-full":
      return value;
    case "verify-ca":
      return "verify-full";
    default:
      throw new TypeError(
        `ssl ${JSON.stringify(value)} is not supported; use false, disable, allow, prefer, ` +
          `require, verify-ca, verify-full or TLS options`,
      );
  }
}
