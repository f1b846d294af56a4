/**
 * Poolers that misbehave, and the session-mode pooler: a pooler that refuses connections fails a
 * worker's startup clearly (never with the password); a pooler out of client connections
 * (`max_client_conn`) is logged and ridden out; a session-mode pooler runs the load like a direct
 * connection does.
 */
import assert from "node:assert/strict";
import { createWorker, type FlowWorker, type LogRecord, WorkerStartupError } from "../../mod.ts";
import postgres from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import {
  backdateStuck,
  checkInvariants,
  createExecLog,
  loadV1,
  loadV2,
  QUEUES,
  repeat,
  seedFromEnv,
  startLoadRuns,
  waitForLoadRuns,
} from "../reliability/harness.ts";
import { bouncerFor } from "./harness.ts";

const db = testDatabase(import.meta.url);

db.test("a pooler that refuses connections fails startup clearly", async ({ url }) => {
  const bouncer = await bouncerFor(url);
  await bouncer.stop();
  const target = new URL(bouncer.via(url));
  target.password = "hunter2-secret";
  const worker = createWorker(loadV1, {
    queueName: "rel_a",
    connectionString: target.toString(),
  } as never);
  const started = performance.now();
  try {
    await assert.rejects(worker.start(), (e: unknown) => {
      assert.ok(e instanceof WorkerStartupError);
      assert.match(e.message, /could not start: .*ECONNREFUSED/);
      assert.match(e.message, new RegExp(`127\\.0\\.0\\.1:${bouncer.port}`));
      assert.doesNotMatch(e.message, /hunter2/);
      return true;
    });
    assert.ok(performance.now() - started < 15_000, "a refusal is not waited out");
    assert.equal(worker.state, "failed");
  } finally {
    await worker.stop();
    await bouncer.destroy();
  }
});

db.test("a pooler out of client connections is logged and ridden out", async ({ sql, url }) => {
  const seed = seedFromEnv();
  await createExecLog(sql);
  const bouncer = await bouncerFor(url, "transaction", { maxClientConn: 6 });
  // Another client takes four of the six client connections for a while: each worker starts on
  // one of the last two, and every further connection they open is refused until the intruder leaves.
  const intruder = postgres(bouncer.via(url), { max: 4, onnotice: () => {} });
  const workers: FlowWorker[] = [];
  try {
    await Promise.all([1, 2, 3, 4].map(() => intruder`select pg_sleep(0.1)`));
    const logSets: LogRecord[][] = [];
    const logs = () => logSets.flat();
    for (const queue of QUEUES) {
      const started = await startWorker(workers, [loadV1, loadV2], {
        connectionString: bouncer.via(url),
        queueName: queue,
        maxPgConnections: 4,
        visibilityTimeout: 2,
        stalledRecoveryIntervalMs: 300,
        context: { load: { failRate: 0, seed, delayMs: 10 } },
      });
      logSets.push(started.logs);
    }
    const runs = await startLoadRuns(sql, 4);
    await waitFor(
      () => logs().some((l) => /max_client_conn/.test(String(l.fields.error))),
      { what: "the pooler to refuse the worker a connection" },
    );
    await intruder.end();
    // Reports refused meanwhile leave tasks started until recovery: age them instead of waiting
    // timeout + 30 s.
    const stop = repeat(300, () => backdateStuck(sql, 8000));
    try {
      await waitFor(
        () =>
          sql<{ open: number }[]>`
            select count(*)::int as open from pgflow.runs
            where run_id = any (${runs}::uuid[]) and status = 'started'`.then(([r]) =>
            r.open === 0
          ),
        { what: "every run to end", timeoutMs: 60_000 },
      );
    } finally {
      await stop();
    }
    const refused = logs().filter((l) => /max_client_conn/.test(String(l.fields.error)));
    // Handlers' own queries fail too (their tasks are retried); the worker's own calls warn.
    assert.ok(refused.some((l) => l.level === "warn" || l.level === "error"));
    for (const line of refused) {
      assert.ok(QUEUES.includes(line.fields.queue as typeof QUEUES[number]));
      assert.equal(typeof line.fields.worker, "string");
    }
    assert.deepEqual(workers.map((w) => w.state), ["running", "running"]);
  } finally {
    await intruder.end({ timeout: 1 });
    await stopAll(workers);
    await bouncer.destroy();
  }
}, { fresh: true });

db.test(
  "through a session-mode pooler the load runs as on a direct connection",
  async ({ sql, url }) => {
    const seed = seedFromEnv();
    await createExecLog(sql);
    const bouncer = await bouncerFor(url, "session");
    const workers: FlowWorker[] = [];
    try {
      for (const queue of QUEUES) {
        await startWorker(workers, [loadV1, loadV2], {
          connectionString: bouncer.via(url),
          queueName: queue,
          visibilityTimeout: 2,
          stalledRecoveryIntervalMs: 300,
          context: { load: { failRate: 0.1, seed, delayMs: 0 } },
        });
      }
      await startLoadRuns(sql, 20);
      await waitForLoadRuns(sql, 180_000);
      const figures = await checkInvariants(sql);
      assert.equal(figures.runs, 20);
      await stopAll(workers);
      const [{ running }] = await sql<{ running: number }[]>`
      select count(*)::int as running from pgflow.workers where stopped_at is null`;
      assert.equal(running, 0);
    } finally {
      await stopAll(workers);
      await bouncer.destroy();
    }
  },
  { fresh: true },
);
