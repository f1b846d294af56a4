/**
 * The database a command works on: `--database-url`, else `EDGE_WORKER_DB_URL`, else
 * `DATABASE_URL`; opened with `createPool` (safe behind a transaction pooler), checked with one
 * query, and every failure explained without the password.
 *
 * @module
 */
import { DATABASE_URL_VARIABLES, databaseUrlSource } from "../platform/env.ts";
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
 * import { databaseUrl } from "./database.ts";
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
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    // Not echoed: a value that does not parse may hold a password in a place redact() misses.
    throw new UsageError(
      `${source} is not a URL; give postgres://user:password@host:port/db (special characters ` +
        "in the password percent-encoded, e.g. @ as %40)",
    );
  }
  if (parsed.protocol !== "postgres:" && parsed.protocol !== "postgresql:") {
    throw new UsageError(
      `${source} is a ${parsed.protocol} URL (${redact(url)}); give postgres://user:password@` +
        "host:port/db",
    );
  }
  if (parsed.hostname === "") {
    throw new UsageError(`${source} names no host (${redact(url)}); give postgres://user@host/db`);
  }
  return { url, source };
}

/**
 * The URL without its password, for messages.
 *
 * @example
 * ```ts
 * import { redact } from "./database.ts";
 *
 * redact("postgres://postgres:secret@db.example.com:6543/postgres");
 * // "postgres://postgres:***@db.example.com:6543/postgres"
 * ```
 */
export function redact(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = "***";
    return u.toString();
  } catch {
    return redactText(url);
  }
}

function redactText(text: string): string {
  return text.replace(/(\/\/[^:/@]*:)[^@]*@/, "$1***@");
}

/**
 * Opens a one-connection pool and checks it answers; a failure is a {@link CliError} that says
 * what was wrong (refused, unknown host, authentication, no such database, …) and what to do.
 *
 * @example
 * ```ts
 * import { openDatabase } from "./database.ts";
 *
 * // const sql = await openDatabase("postgres://postgres@127.0.0.1:5432/postgres"); … await sql.end();
 * ```
 */
export async function openDatabase(url: string): Promise<Sql> {
  const sql = createPool(url, { max: 1, connect_timeout: 10, application_name: "pgflow-cli" });
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
 * import { connectionProblem } from "./database.ts";
 *
 * connectionProblem({ code: "ECONNREFUSED" }, "postgres://postgres@127.0.0.1:1/postgres");
 * ```
 */
export function connectionProblem(error: unknown, url: string): string {
  const e = error as { code?: string; message?: string };
  const u = new URL(url);
  const target = `${u.hostname}:${u.port || 5432}`;
  const user = decodeURIComponent(u.username) || "(default user)";
  const db = decodeURIComponent(u.pathname.slice(1)) || user;
  const check = `check the URL (${redact(url)})`;
  switch (e.code) {
    case "ECONNREFUSED":
      return `could not connect to ${target}: connection refused. Is the database running ` +
        `there? For the local database run \`${command("db start")}\`; otherwise ${check}`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `could not connect: host ${u.hostname} not found; ${check}`;
    case "CONNECT_TIMEOUT":
    case "ETIMEDOUT":
      return `could not connect to ${target}: no answer within 10 s; ${check} and that the ` +
        "host accepts connections from here";
    case "28P01":
    case "28000":
      return `the server at ${target} refused user ${user}: ${e.message}. Check the user and ` +
        `password in the URL (${redact(url)})`;
    case "3D000":
      return `the server at ${target} has no database ${db}; ${check}`;
    default:
      return `could not connect to ${target} as ${user}: ${e.message ?? String(error)}; ${check}`;
  }
}
