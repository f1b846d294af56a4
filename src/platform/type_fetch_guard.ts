/**
 * Keeps a process alive when postgres.js's array-type fetch fails.
 *
 * postgres.js 3.4.7 runs one query of its own on every new connection, before the connection's
 * first query (`fetchArrayTypes` in its `src/connection.js`): it learns the array type of every
 * type, which is what lets it send JavaScript arrays as parameters (`${ids}::bigint[]`). Nothing
 * awaits that promise. When the backend is terminated during it (`pg_terminate_backend`, a
 * failover, a pooler restart: 57P01, ECONNRESET, CONNECTION_CLOSED), the promise rejects
 * unhandled, and Deno, like Node, ends the process on an unhandled rejection. The connection
 * itself recovers as usual (the waiting query fails with the same error and the next one opens a
 * new connection, which fetches again), so only the process exit is wrong. Turning `fetch_types`
 * off is no way out: array parameters then break.
 *
 * {@link installTypeFetchGuard} adds one `unhandledrejection` listener that prevents exactly
 * that rejection and nothing else: its reason is an `Error` carrying postgres.js's own `query`
 * property with the text of the type fetch (compared with whitespace collapsed) and no
 * parameters. Every other unhandled rejection reaches the runtime unchanged.
 *
 * @module
 */

/** The type fetch's text, whitespace collapsed (postgres.js 3.4.7, src/connection.js). */
const TYPE_FETCH_QUERY = "select b.oid, b.typarray from pg_catalog.pg_type a " +
  "left join pg_catalog.pg_type b on b.oid = a.typelem where a.typcategory = 'A' " +
  "group by b.oid, b.typarray order by b.oid";

let installed = false;
let prevented = 0;

/**
 * Whether `reason` is the rejection of postgres.js's array-type fetch: an `Error` whose own
 * `query` property (which postgres.js attaches to every query error) is the type fetch's text,
 * with an empty `parameters` array.
 *
 * @example
 * ```ts
 * import { isTypeFetchRejection } from "./type_fetch_guard.ts";
 *
 * isTypeFetchRejection(new Error("boom")); // false
 * ```
 */
export function isTypeFetchRejection(reason: unknown): boolean {
  if (!(reason instanceof Error)) return false;
  const query = Object.getOwnPropertyDescriptor(reason, "query")?.value;
  const parameters = Object.getOwnPropertyDescriptor(reason, "parameters")?.value;
  return typeof query === "string" && query.replace(/\s+/g, " ").trim() === TYPE_FETCH_QUERY &&
    Array.isArray(parameters) && parameters.length === 0;
}

/**
 * Installs, once per process (later calls do nothing), the `unhandledrejection` listener that
 * prevents the rejection of postgres.js's array-type fetch (see the module documentation) and
 * only that one. `createPool` calls it, so every pool the worker opens is covered; call it
 * yourself when you hand the worker a pool of your own made with plain `postgres()`. Returns
 * whether this call installed the listener.
 *
 * @example
 * ```ts
 * import postgres from "npm:postgres@3.4.7";
 * import { installTypeFetchGuard } from "@pgflow/shared/tools";
 *
 * installTypeFetchGuard();
 * const sql = postgres("postgres://postgres@127.0.0.1:5432/postgres", { prepare: false });
 * // EdgeWorker.start(flow, { sql });
 * ```
 */
export function installTypeFetchGuard(): boolean {
  if (installed || typeof globalThis.addEventListener !== "function") return false;
  installed = true;
  globalThis.addEventListener("unhandledrejection", (event: PromiseRejectionEvent) => {
    if (!isTypeFetchRejection(event.reason)) return;
    prevented++;
    event.preventDefault();
  });
  return true;
}

/**
 * How many type-fetch rejections the guard has prevented in this process.
 *
 * @example
 * ```ts
 * import { preventedTypeFetchRejections } from "./type_fetch_guard.ts";
 *
 * console.log(preventedTypeFetchRejections()); // 0
 * ```
 */
export function preventedTypeFetchRejections(): number {
  return prevented;
}
