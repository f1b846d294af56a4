import type postgres from "npm:postgres@3.4.7";

/**
 * Wraps a postgres.js pool so that a query with an `undefined` parameter is rejected before it
 * reaches a connection.
 *
 * Why: postgres.js 3.4 builds a query only once it is handed to a connection. When that
 * connection is still running an earlier query, an `undefined` parameter (`UNDEFINED_VALUE`)
 * rejects the *earlier* query and leaves the new one queued but never sent, so it never settles
 * and the connection serves nothing again: on a direct connection and behind any pooler alike.
 * Rejecting such a query up front gives the caller the error and leaves the pool intact.
 * Transactions (`sql.begin`, savepoints) and reserved connections are wrapped the same way.
 */
export function guardSql(sql: postgres.Sql): postgres.Sql {
  return guard(sql) as postgres.Sql;
}

// deno-lint-ignore no-explicit-any
type Callable = (...args: any[]) => any;

function guard(target: Callable): Callable {
  return new Proxy(target, {
    apply(fn, self, args) {
      const [strings, ...values] = args;
      if (isTemplate(strings)) {
        const problem = findUndefined(values);
        if (problem !== undefined) return failed(problem);
      }
      return Reflect.apply(fn, self, args);
    },
    get(fn, key, receiver) {
      const value = Reflect.get(fn, key, receiver);
      if (key === "unsafe" && typeof value === "function") {
        return (query: string, params?: unknown[], options?: unknown) => {
          const at = params?.findIndex((p) => p === undefined) ?? -1;
          return at >= 0 ? failed(`$${at + 1}`) : value.call(fn, query, params, options);
        };
      }
      if ((key === "begin" || key === "savepoint") && typeof value === "function") {
        return (...args: unknown[]) => {
          const body = args.pop() as Callable;
          return value.call(fn, ...args, (tx: Callable) => body(guard(tx)));
        };
      }
      if (key === "reserve" && typeof value === "function") {
        return async () => guard(await value.call(fn));
      }
      return value;
    },
  });
}

function isTemplate(value: unknown): value is TemplateStringsArray {
  return Array.isArray(value) && Array.isArray((value as { raw?: unknown }).raw);
}

/** The first undefined value among a query's parameters, as `$n` (or a helper's key). */
function findUndefined(values: readonly unknown[]): string | undefined {
  for (let i = 0; i < values.length; i++) {
    const value = values[i];
    if (value === undefined) return `$${i + 1}`;
    if (value === null || typeof value !== "object") continue;
    const fragment = value as { strings?: unknown; args?: unknown[] };
    if (isTemplate(fragment.strings) && Array.isArray(fragment.args)) {
      const inner = findUndefined(fragment.args);
      if (inner !== undefined) return `a fragment's ${inner}`;
    }
    // sql(object) and sql([objects]) helpers.
    const first = (value as { first?: unknown }).first;
    for (const row of Array.isArray(first) ? first : [first]) {
      if (row === null || typeof row !== "object" || row instanceof Date) continue;
      for (const [key, v] of Object.entries(row)) {
        if (v === undefined) return `the value of "${key}"`;
      }
    }
  }
  return undefined;
}

/** A query that failed before it was sent: a rejected promise with postgres.js's query methods. */
function failed(where: string): postgres.PendingQuery<postgres.Row[]> {
  const error = Object.assign(
    new Error(
      `UNDEFINED_VALUE: ${where} is undefined; pass null for SQL NULL (the query was not sent)`,
    ),
    { code: "UNDEFINED_VALUE" },
  );
  // Rejects only once awaited, as a postgres.js query runs only once awaited: a query built and
  // awaited later is no unhandled rejection.
  const settle = () => Promise.reject(error);
  const self = () => pending;
  const pending = {
    then: (ok?: Callable, fail?: Callable) => settle().then(ok, fail),
    catch: (fail?: Callable) => settle().catch(fail),
    finally: (done?: () => void) => settle().finally(done),
    execute: self,
    values: self,
    raw: self,
    simple: self,
    describe: self,
    cancel: () => {},
  };
  return pending as unknown as postgres.PendingQuery<postgres.Row[]>;
}
