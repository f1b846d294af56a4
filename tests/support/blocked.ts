/**
 * Race tests: a statement sent on another session while the test's own transaction holds what it
 * needs, checked to be waiting for a lock (never merely slow), and its outcome once released.
 *
 * @module
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { waitFor } from "./db.ts";

/** What became of a statement sent by {@link sendBlocked}. */
export interface Blocked {
  /** `"done"`, or the SQLSTATE it failed with. */
  readonly outcome: Promise<string>;
}

/**
 * Sends `query` on `session` (a pool of one connection) and waits until that session waits for a
 * lock, as `sql` sees it in `pg_stat_activity`; fails at once if the statement ends first (nothing
 * made it wait). Call it while holding the lock; read the outcome after releasing it.
 *
 * @example
 * ```ts
 * // await a.begin(async (tx) => {
 * //   await tx`select pgflow.retry_run(${id}, again => false)`;
 * //   second = await sendBlocked(sql, b, (s) => s`select pgflow.retry_run(${id}, again => false)`, "the second retry");
 * // });
 * // assert.equal(await second.outcome, "23505");
 * ```
 */
export async function sendBlocked(
  sql: postgres.Sql,
  session: postgres.Sql,
  query: (session: postgres.Sql) => postgres.PendingQuery<postgres.Row[]>,
  what: string,
): Promise<Blocked> {
  const [{ pid }] = await session<{ pid: number }[]>`select pg_backend_pid() as pid`;
  let settled: string | undefined;
  const outcome = query(session).execute().then(
    () => "done",
    (e: { code?: string }) => e.code ?? String(e),
  );
  outcome.then((o) => settled = o);
  await waitFor(async () => {
    assert.equal(settled, undefined, `${what} ended (${settled}) instead of waiting for the lock`);
    return (await sql`select 1 from pg_stat_activity
                      where pid = ${pid} and wait_event_type = 'Lock'`).length > 0;
  }, { what: `${what} to wait for the lock`, timeoutMs: 60_000 });
  return { outcome };
}
