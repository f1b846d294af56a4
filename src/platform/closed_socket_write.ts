/**
 * A guard against one defect of postgres.js 3.4 (the driver the worker uses): a write shorter than
 * 1 KB is sent on the next `setImmediate`, and when the server or a pooler closes the connection
 * first, that callback writes to a socket the driver has already set to `null`. The `TypeError`
 * is thrown from the immediate, outside any query's promise, so nothing can catch it and it ends
 * the process: a worker behind PgBouncer or Supavisor died on a pooler restart. The driver has
 * already failed the connection's queries (`CONNECTION_CLOSED`) or they end by the worker's query
 * timeouts, and the pool opens a new connection for the next query; the lost write was for the
 * closed connection. So this error, and only this one, is reported as a warning and not allowed to
 * end the process. Every other uncaught error still does.
 *
 * @module
 */
import type { Logger } from "./logger.ts";

let installed = false;
let report: Logger | undefined;

/**
 * Whether `error` is the driver's write to a closed connection: a `TypeError` reading `write` of
 * `null`, thrown by `nextWrite` in postgres.js's `connection.js`.
 *
 * @example
 * ```ts
 * import { isClosedSocketWrite } from "./closed_socket_write.ts";
 *
 * isClosedSocketWrite(new Error("boom")); // false
 * ```
 */
export function isClosedSocketWrite(error: unknown): boolean {
  return error instanceof TypeError &&
    error.message === "Cannot read properties of null (reading 'write')" &&
    /\bnextWrite\b/.test(error.stack ?? "") &&
    /postgres[/\\].*connection\.js/.test(error.stack ?? "");
}

/**
 * Keeps the process alive through the driver's write to a closed connection, reporting it on
 * `log` (the latest worker's logger). Installed once per process; later calls only change the
 * logger.
 *
 * @example
 * ```ts
 * import { guardClosedSocketWrites } from "./closed_socket_write.ts";
 * import { createLogger } from "./logger.ts";
 *
 * guardClosedSocketWrites(createLogger({ level: "warn" }));
 * ```
 */
export function guardClosedSocketWrites(log: Logger): void {
  report = log;
  if (installed) return;
  installed = true;
  globalThis.addEventListener("error", (event: ErrorEvent) => {
    if (!isClosedSocketWrite(event.error)) return;
    event.preventDefault();
    report?.warn("database driver wrote to a closed connection; ignored", {
      action: "none: the connection's queries fail or time out and are retried on a new one",
    });
  });
}
