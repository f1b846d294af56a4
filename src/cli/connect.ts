/**
 * The database a command works on: `--database-url`, else `EDGE_WORKER_DB_URL`, else
 * `DATABASE_URL`; opened with `createPool` (safe behind a transaction pooler), checked with one
 * query, and every failure explained without the password.
 *
 * @module
 */
import { DATABASE_URL_VARIABLES, databaseUrlSource } from "../platform/env.ts";
import {
  type DatabaseUrl,
  DatabaseUrlError,
  maskDatabaseUrl,
  maskSecrets,
  parseDatabaseUrl,
} from "../platform/database_url.ts";
import { createPool } from "../platform/pool.ts";
import { connectionProblem as explainConnection } from "../operations/connection_problem.ts";
import type { Sql } from "../platform/types.ts";
import { CliError, command, UsageError } from "./output.ts";

/** Where the URL came from, for messages. */
export type UrlSource = "--database-url" | "EDGE_WORKER_DB_URL" | "DATABASE_URL";

/**
 * Picks the database URL (the flag, else the environment in the worker's order,
 * `databaseUrlSource`) and checks its form; a missing or malformed URL is a usage error.
 *
 * @example
 * ```ts
 * import { databaseUrl } from "./connect.ts";
 *
 * databaseUrl("postgres://postgres@127.0.0.1:5432/postgres", "pgflow migrate").url;
 * ```
 */
export function databaseUrl(
  flag: string | undefined,
  commandName: string,
  env: (name: string) => string | undefined = (n) => Deno.env.get(n),
): { url: string; source: UrlSource } {
  const fromEnv = databaseUrlSource(
    Object.fromEntries(DATABASE_URL_VARIABLES.map((name) => [name, env(name)])),
  );
  const found: [UrlSource, string] | undefined = flag !== undefined && flag !== ""
    ? ["--database-url", flag]
    : fromEnv && [fromEnv.variable, fromEnv.url];
  if (!found) {
    throw new UsageError(
      `${commandName} needs a database: pass --database-url postgres://user:password@host:port/db, ` +
        "or set EDGE_WORKER_DB_URL or DATABASE_URL. For the local database: " +
        `--database-url "$(${command("db url")})"`,
    );
  }
  const [source, url] = found;
  try {
    parseDatabaseUrl(url, source);
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  return { url, source };
}

/**
 * The URL without its password, for messages (also when it does not parse).
 *
 * @example
 * ```ts
 * import { redact } from "./connect.ts";
 *
 * redact("postgres://postgres:secret@db.example.com:6543/postgres");
 * // "postgres://postgres:***@db.example.com:6543/postgres"
 * ```
 */
export function redact(url: string): string {
  return maskDatabaseUrl(url);
}

/**
 * Opens a one-connection pool and checks it answers; a failure is a {@link CliError} that says
 * what was wrong (refused, unknown host, authentication, no such database, …) and what to do.
 *
 * @example
 * ```ts
 * import { openDatabase } from "./connect.ts";
 *
 * // const sql = await openDatabase("postgres://postgres@127.0.0.1:5432/postgres"); … await sql.end();
 * ```
 */
export async function openDatabase(url: string): Promise<Sql> {
  let sql: Sql;
  try {
    sql = createPool(url, { max: 1, connect_timeout: 10, application_name: "pgflow-cli" });
  } catch (error) {
    if (error instanceof DatabaseUrlError) throw new UsageError(error.message);
    throw new CliError(connectionProblem(error, url));
  }
  try {
    await sql`select 1`;
    return sql;
  } catch (error) {
    await sql.end({ timeout: 1 }).catch(() => {});
    throw new CliError(connectionProblem(error, url));
  }
}

/**
 * Explains a failure to connect, naming the target (never the password) and what to do: the
 * sentence the worker and the client say too (`src/operations/connection_problem.ts`), with this
 * CLI's own spelling of the command that starts a local database.
 *
 * @example
 * ```ts
 * import { connectionProblem } from "./connect.ts";
 *
 * connectionProblem({ code: "ECONNREFUSED" }, "postgres://postgres@127.0.0.1:1/postgres");
 * ```
 */
export function connectionProblem(error: unknown, url: string): string {
  const known = explainConnection(error, url, command);
  if (known !== undefined) return known;
  let u: DatabaseUrl;
  try {
    u = parseDatabaseUrl(url);
  } catch (problem) {
    return (problem as Error).message;
  }
  const message = maskSecrets((error as { message?: string })?.message ?? String(error), url);
  return `could not connect to ${u.host}:${u.port} as ${u.user ?? "(default user)"}: ${message}; ` +
    `check the URL (${u.masked})`;
}
