import { socketForBackend } from "./wire_gate.ts";

/** The bound of a worker's database call other than the poll, unless configured. */
export const DEFAULT_QUERY_TIMEOUT_MS = 20_000;

/**
 * A database call that did not answer within its bound. Its connection was destroyed (postgres.js
 * opens a new one for the next query), so whatever the call did is either rolled back by the
 * server or, if it committed, found again by the engine's own recovery (reports are idempotent
 * and attempt-aware; an unreported claim is taken back by stalled recovery).
 *
 * @example
 * ```ts
 * import { DatabaseTimeoutError } from "@pgflow/shared";
 *
 * const error = new DatabaseTimeoutError("heartbeat", 20_000);
 * console.log(error.message); // "heartbeat: no answer within 20000 ms; its connection was replaced"
 * ```
 */
export class DatabaseTimeoutError extends Error {
  /** What the call was. */
  readonly what: string;
  /** Its bound in milliseconds. */
  readonly timeoutMs: number;

  /**
   * Names the call and its bound.
   *
   * @param what the call, e.g. `complete_task`
   * @param timeoutMs its bound
   */
  constructor(what: string, timeoutMs: number) {
    super(`${what}: no answer within ${timeoutMs} ms; its connection was replaced`);
    this.name = "DatabaseTimeoutError";
    this.what = what;
    this.timeoutMs = timeoutMs;
  }
}

/** The parts of a postgres.js query this module uses (`state` is the connection's backend key). */
interface QueryHandle<T> extends PromiseLike<T> {
  readonly state?: { readonly pid: number | null; readonly secret: number | null } | null;
  cancel?(): unknown;
}

/**
 * Awaits `query`, but never longer than `timeoutMs`. When the bound passes, the query is
 * abandoned: the connection it was sent on is destroyed (so a reply lost by a pooler can never
 * hold it, or the pool, again) and the call rejects with a {@link DatabaseTimeoutError}. A query
 * still waiting for a free connection is cancelled instead (it was never sent). Only connections
 * of pools made by `createPool` can be destroyed this way; on another pool the query is cancelled
 * (a cancel request), which frees the call but not a wedged connection.
 *
 * @example
 * ```ts
 * import { createPool } from "@pgflow/shared";
 * import { bounded } from "@pgflow/shared/tools";
 *
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres");
 * // const [row] = await bounded(sql`select pgflow.heartbeat(${id}::uuid) as d`, "heartbeat", 20_000);
 * ```
 */
export function bounded<T>(query: PromiseLike<T>, what: string, timeoutMs: number): Promise<T> {
  return new Promise<T>((resolve, reject) => {
    let settled = false;
    const timer = setTimeout(() => {
      if (settled) return;
      settled = true;
      const error = new DatabaseTimeoutError(what, timeoutMs);
      abandon(query as QueryHandle<T>, error);
      reject(error);
    }, timeoutMs);
    query.then(
      (value) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(value);
      },
      (error) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        reject(error);
      },
    );
  });
}

function abandon<T>(query: QueryHandle<T>, error: DatabaseTimeoutError): void {
  const key = query.state;
  const socket = key?.pid != null && key.secret != null
    ? socketForBackend(key.pid, key.secret)
    : undefined;
  if (socket !== undefined) {
    // postgres.js fails every query on the connection with this error and reconnects on demand.
    socket.destroy(error);
  } else {
    query.cancel?.();
  }
}
