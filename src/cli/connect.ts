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
 * Explains a failure to connect, naming the target (never the password) and what to do.
 *
 * @example
 * ```ts
 * import { connectionProblem } from "./connect.ts";
 *
 * connectionProblem({ code: "ECONNREFUSED" }, "postgres://postgres@127.0.0.1:1/postgres");
 * ```
 */
export function connectionProblem(error: unknown, url: string): string {
  const e = error as { code?: string; message?: string };
  const message = maskSecrets(e.message ?? String(error), url);
  let u: DatabaseUrl;
  try {
    u = parseDatabaseUrl(url);
  } catch (problem) {
    return (problem as Error).message;
  }
  const target = `${u.host}:${u.port}`;
  const user = u.user ?? "(default user)";
  const db = u.database ?? user;
  const check = `check the URL (${u.masked})`;
  switch (e.code) {
    case "ECONNREFUSED":
      return `could not connect to ${target}: connection refused. Is the database running ` +
        `there? For the local database run \`${command("db start")}\`; otherwise ${check}`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `could not connect: host ${u.host} not found; ${check}`;
    case "CONNECT_TIMEOUT":
    case "ETIMEDOUT":
      return `could not connect to ${target}: no answer within 10 s; ${check} and that the ` +
        "host accepts connections from here";
    case "28P01":
    case "28000":
      return `the server at ${target} refused user ${user}: ${message}. Check the user and ` +
        `password in the URL (${u.masked})`;
    case "3D000":
      return `the server at ${target} has no database ${db}; ${check}`;
    default:
      return `could not connect to ${target} as ${user}: ${message}; ${check}`;
  }
}
