/**
 * Pieces of the pooler tests: a PgBouncer in front of a test database, load worker processes
 * connected through it, and the checks every scenario ends with (no call hung, PgBouncer never
 * lost track of a server connection).
 *
 * @module
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { type LocalPostgres, startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { type LocalPgBouncer, type PoolMode, startPgBouncer } from "../../local/pgbouncer.ts";
import { waitFor } from "../support/db.ts";
import { type Child, killChild, spawnDeno } from "../e2e/process.ts";

const WORKER = new URL("./fixtures/load_worker.ts", import.meta.url).pathname;

/** PgBouncer in front of the server behind `url` (every database name is forwarded). */
export function bouncerFor(
  url: string,
  mode: PoolMode = "transaction",
  options: { poolSize?: number; maxClientConn?: number } = {},
): Promise<LocalPgBouncer> {
  return startPgBouncer({ serverPort: Number(new URL(url).port), mode, ...options });
}

/** Options of {@link withOwnServerBehindBouncer}. */
export interface OwnServerOptions {
  /** The PgBouncer binary (a test gives one that cannot start). */
  readonly bouncerBinary?: string;
  /** Called once the Postgres is up, before PgBouncer starts. */
  readonly onPostgres?: (pg: LocalPostgres) => void;
}

/**
 * Runs `fn` on a throw-away Postgres of its own (for a scenario that restarts it) with PgBouncer in
 * front; both are stopped however `fn`, or PgBouncer's start, ends.
 */
export async function withOwnServerBehindBouncer<T>(
  fn: (pg: LocalPostgres, bouncer: LocalPgBouncer) => Promise<T>,
  options: OwnServerOptions = {},
): Promise<T> {
  const pg = await startLocalPostgres();
  let bouncer: LocalPgBouncer | undefined;
  try {
    options.onPostgres?.(pg);
    bouncer = await startPgBouncer({ serverPort: pg.port, binary: options.bouncerBinary });
    return await fn(pg, bouncer);
  } finally {
    await bouncer?.destroy();
    await pg.destroy();
  }
}

/** Options of one load worker process. */
export interface WorkerProcessOptions {
  readonly queue: "rel_a" | "rel_b";
  readonly seed: number;
  readonly failRate?: number;
  readonly delayMs?: number;
}

/** Starts a load worker process on `url` (a pooler URL) and waits until it is registered. */
export async function spawnLoadWorker(
  sql: postgres.Sql,
  url: string,
  options: WorkerProcessOptions,
): Promise<Child> {
  const [{ before }] = await sql<{ before: number }[]>`
    select count(*)::int as before from pgflow.workers where stopped_at is null`;
  const child = spawnDeno(WORKER, {
    DATABASE_URL: url,
    QUEUE: options.queue,
    LOAD_SEED: String(options.seed),
    FAIL_RATE: String(options.failRate ?? 0),
    DELAY_MS: String(options.delayMs ?? 0),
  });
  await waitFor(
    () =>
      sql<{ n: number }[]>`select count(*)::int as n from pgflow.workers where stopped_at is null`
        .then(([r]) => r.n > before),
    {
      what: `a worker on ${options.queue} to register; output:\n${child.output()}`,
      timeoutMs: 60_000,
    },
  );
  return child;
}

/** Stops worker processes gracefully (SIGTERM) and returns their exit codes; kills stragglers. */
export async function stopWorkers(children: readonly Child[]): Promise<number[]> {
  return await Promise.all(children.map(async (child) => {
    try {
      child.process.kill("SIGTERM");
    } catch {
      // Already gone.
    }
    const timer = setTimeout(() => killChild(child), 15_000);
    const status = await child.process.status;
    clearTimeout(timer);
    return status.code;
  }));
}

/** Every JSON log line the children wrote. */
export function childLogs(children: readonly Child[]): Record<string, unknown>[] {
  return children.flatMap((c) =>
    c.output().split("\n").filter((l) => l.startsWith("{")).map((l) => {
      try {
        return JSON.parse(l) as Record<string, unknown>;
      } catch {
        return {};
      }
    })
  );
}

/**
 * What must hold after a scenario through a pooler: no worker call went unanswered for its whole
 * bound (that is what a wedged connection looks like), and PgBouncer never received a reply for a
 * server connection it had already handed back.
 */
export async function assertNoWedge(
  bouncer: LocalPgBouncer,
  children: readonly Child[],
): Promise<void> {
  const hung = childLogs(children).filter((l) => /no answer within/.test(String(l.error)));
  assert.deepEqual(hung, [], "no worker call hung");
  const log = await bouncer.log();
  assert.doesNotMatch(log, /when not linked|idle server got dirty/);
}
