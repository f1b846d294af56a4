/**
 * The worker's own pool prepares its statements where the server session stays its own (each
 * query one round trip instead of two: postgres.js describes an unprepared query's parameters
 * before it binds them), and never behind a pooler, where the next transaction may run on a
 * server connection that does not have the statement. Seen from a handler, whose `context.sql`
 * is that pool: `pg_prepared_statements` lists the named statements of the session it runs on.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { Flow, type FlowWorker } from "../../mod.ts";
import { openWorkerPool, preparesOn } from "../../src/worker/worker_pool.ts";
import { testDatabase } from "../support/db.ts";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** A flow whose one step returns the statements prepared on the connection it ran its query on. */
function flow(slug: string) {
  return new Flow<{ n: number }>({ slug }).step({ slug: "a" }, async (_input, ctx) => {
    const rows = await ctx.sql<{ statement: string }[]>`
      select statement from pg_prepared_statements where ${1}::int = 1`;
    return rows.map((r) => r.statement);
  });
}

/** Runs a few runs through a worker started with `config`; returns what each step saw. */
async function prepared(
  url: string,
  slug: string,
  config: Record<string, unknown>,
): Promise<{ seen: string[][]; logged: unknown }> {
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow(slug), config);
    const seen: string[][] = [];
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      for (let n = 0; n < 4; n++) {
        const run = await startRun(sql, slug, { n });
        const done = await waitForRun(sql, run);
        assert.equal(done.status, "completed");
        seen.push((done.output as { a: string[] }).a);
      }
    } finally {
      await sql.end();
    }
    const line = logs.find((r) => r.event === "database connection");
    return { seen, logged: line?.fields.preparedStatements };
  } finally {
    await stopAll(workers);
  }
}

db.test("on a direct connection the worker's pool prepares its statements", async ({ url }) => {
  const { seen, logged } = await prepared(url, "ps_direct", { connectionString: url });
  assert.equal(logged, true);
  // Every step saw at least its own query prepared, and some saw the worker's calls.
  assert.ok(seen.every((s) => s.some((q) => q.includes("pg_prepared_statements"))), String(seen));
  assert.ok(
    seen.flat().some((q) => /pgflow\.(read_and_claim|complete_task|heartbeat|register)/.test(q)),
  );
});

db.test("preparedStatements: 'off' keeps every statement unnamed", async ({ url }) => {
  const { seen, logged } = await prepared(url, "ps_off", {
    connectionString: url,
    preparedStatements: "off",
  });
  assert.equal(logged, false);
  assert.deepEqual(seen.flat(), []);
});

db.test("behind PgBouncer in transaction mode nothing is prepared", async ({ url }) => {
  const bouncer = await startPgBouncer({
    serverPort: Number(new URL(url).port),
    mode: "transaction",
  });
  try {
    const { seen, logged } = await prepared(url, "ps_bouncer", {
      connectionString: bouncer.via(url),
    });
    assert.equal(logged, false);
    assert.deepEqual(seen.flat(), []);
  } finally {
    await bouncer.destroy();
  }
});

Deno.test("preparesOn: auto prepares only where the server session stays the pool's", () => {
  assert.equal(preparesOn("auto", "direct"), true);
  assert.equal(preparesOn("auto", "session pooler"), true);
  assert.equal(preparesOn("auto", "transaction pooler"), false);
  assert.equal(preparesOn("auto", "pooler"), false);
  assert.equal(preparesOn("on", "pooler"), true);
  assert.equal(preparesOn("off", "direct"), false);
});

db.test("the worker's pool prepares on the connection it was described on", async ({ url, sql }) => {
  // One connection setup at startup, not two: the pool that told the connection is direct is the
  // one that prepares, so its connection (opened before the pool was returned) serves the next
  // query, named.
  const pool = await openWorkerPool(url, 4, "auto", 10_000);
  const returned = new Date();
  try {
    assert.equal(pool.prepared, true);
    const [{ pid }] = await pool.sql<{ pid: number }[]>`select pg_backend_pid() as pid
                                                       where ${1}::int = 1`;
    const [backend] = await sql<{ started: Date }[]>`
      select backend_start as started from pg_stat_activity where pid = ${pid}`;
    assert.ok(
      backend.started < returned,
      `the pool's connection started at ${backend.started.toISOString()}, after the pool was ` +
        `returned at ${returned.toISOString()}: a second connection was opened`,
    );
    const statements = await pool.sql<{ statement: string }[]>`
      select statement from pg_prepared_statements where ${2}::int = 2`;
    assert.ok(statements.some((s) => s.statement.includes("pg_backend_pid")), String(statements));
  } finally {
    await pool.sql.end();
  }
});

db.test("a worker's pool that prepares on: the first statement is already named", async ({ url }) => {
  const pool = await openWorkerPool(url, 2, "on", 10_000);
  try {
    assert.equal(pool.prepared, true);
    const statements = await pool.sql<{ statement: string }[]>`
      select statement from pg_prepared_statements where ${1}::int = 1`;
    assert.ok(statements.some((s) => s.statement.includes("pg_backend_pid")), String(statements));
  } finally {
    await pool.sql.end();
  }
});
