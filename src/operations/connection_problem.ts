/**
 * What to say when a database cannot be reached: the same sentence from the CLI, the worker and
 * the client. Each names the target (never the password), what went wrong, what to check, and for
 * a refused connection the command that starts a local database.
 *
 * @module
 */
import { maskSecrets, parseDatabaseUrl } from "../platform/database_url.ts";
import { cliCommand } from "./schema_version.ts";

/** The error codes of a connection that could not be made or was not let in. */
const CONNECTION_CODES: ReadonlySet<string> = new Set([
  "ECONNREFUSED",
  "ENOTFOUND",
  "EAI_AGAIN",
  "CONNECT_TIMEOUT",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "28P01",
  "28000",
  "3D000",
]);

/**
 * Whether `error` says the database could not be reached or refused the login (refused, unknown
 * host, no answer, bad password, no such database): an expected failure with a known fix, not a
 * bug, so it is reported by its hint rather than by a stack.
 *
 * @example
 * ```ts
 * import { isConnectionFailure } from "./connection_problem.ts";
 *
 * isConnectionFailure({ code: "ECONNREFUSED" }); // true
 * ```
 */
export function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" && CONNECTION_CODES.has(code);
}

/**
 * Explains a failure to reach the database at `url` (when known; else the address in the error),
 * naming the target, never the password, and what to do; `undefined` when `error` is not a
 * connection failure ({@link isConnectionFailure}). `command` spells a CLI command (default: the
 * versioned `jsr:` form).
 *
 * @example
 * ```ts
 * import { connectionProblem } from "./connection_problem.ts";
 *
 * connectionProblem({ code: "ECONNREFUSED" }, "postgres://postgres@127.0.0.1:1/postgres");
 * // "could not connect to 127.0.0.1:1: connection refused (ECONNREFUSED). Is the database …"
 * ```
 */
export function connectionProblem(
  error: unknown,
  url?: string,
  command: (args: string) => string = cliCommand,
): string | undefined {
  if (!isConnectionFailure(error)) return undefined;
  const e = error as { code: string; message?: string; address?: unknown; port?: unknown };
  const message = maskSecrets(e.message ?? String(error), url);
  let host: string;
  let target: string;
  let user = "(default user)";
  let db: string | undefined;
  let masked: string | undefined;
  let check: string;
  if (url !== undefined) {
    try {
      const u = parseDatabaseUrl(url);
      host = u.host;
      target = `${u.host}:${u.port}`;
      user = u.user ?? user;
      db = u.database ?? u.user;
      masked = u.masked;
      check = `check the URL (${u.masked})`;
    } catch (problem) {
      return (problem as Error).message;
    }
  } else {
    host = typeof e.address === "string" ? e.address : "the database";
    target = typeof e.port === "number" ? `${host}:${e.port}` : host;
    check = "check the pool's connection settings";
  }
  switch (e.code) {
    case "ECONNREFUSED":
      return `could not connect to ${target}: connection refused (ECONNREFUSED). Is the database ` +
        `running there? For the local database run \`${command("db start")}\`; otherwise ${check}`;
    case "ENOTFOUND":
    case "EAI_AGAIN":
      return `could not connect: host ${host} not found (${e.code}); ${check}`;
    case "CONNECT_TIMEOUT":
    case "ETIMEDOUT":
      return `could not connect to ${target}: no answer in time (${e.code}); ${check} and that ` +
        "the host accepts connections from here";
    case "EHOSTUNREACH":
    case "ENETUNREACH":
      return `could not connect to ${target}: no route to it (${e.code}); ${check} and this ` +
        "machine's network";
    case "28P01":
    case "28000":
      return `the server at ${target} refused user ${user}: ${message}. Check the user and ` +
        `password${masked === undefined ? "" : ` in the URL (${masked})`}`;
    default: // 3D000
      return `the server at ${target} has no database ${db ?? "of that name"}; ${check}`;
  }
}

/**
 * The database could not be reached or refused the login: an expected failure, reported by its
 * message (what went wrong, what to check, the command that starts a local database), without a
 * stack. `code` is the cause's (`ECONNREFUSED`, `ENOTFOUND`, `28P01`, …).
 *
 * @example
 * ```ts
 * import { DatabaseConnectionError } from "@pgflow/shared";
 *
 * function explain(e: unknown): string {
 *   return e instanceof DatabaseConnectionError ? `${e.code}: ${e.message}` : String(e);
 * }
 * ```
 */
export class DatabaseConnectionError extends Error {
  /** The cause's code: `ECONNREFUSED`, `ENOTFOUND`, `EAI_AGAIN`, `CONNECT_TIMEOUT`, `28P01`, … */
  readonly code: string;

  /**
   * A database that could not be reached, explained.
   *
   * @param message what went wrong and what to do ({@link connectionProblem})
   * @param code the cause's code
   */
  constructor(message: string, code: string) {
    super(message);
    this.name = "DatabaseConnectionError";
    this.code = code;
    withoutStack(this);
  }
}

/**
 * Takes the frames out of an expected failure's stack: a program that does not catch it prints its
 * message (which says what to do), not the frames of the library that raised it.
 *
 * @example
 * ```ts
 * import { withoutStack } from "./connection_problem.ts";
 *
 * throw withoutStack(new Error("could not connect to 127.0.0.1:1: connection refused …"));
 * ```
 */
export function withoutStack<E extends Error>(error: E): E {
  // V8 leaves out every frame up to the given function's call; one never called leaves none.
  Error.captureStackTrace(error, neverCalled);
  return error;
}

function neverCalled(): void {}
