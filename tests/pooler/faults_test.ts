/**
 * Faults through PgBouncer in transaction mode, with worker processes: a worker killed mid-batch,
 * PgBouncer restarted mid-run, and Postgres restarted behind it. Each time the survivors recover
 * on their own, every run ends and no attempt runs twice.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { type Child, killChild } from "../e2e/process.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import {
  backdateStuck,
  checkInvariants,
  createExecLog,
  QUEUES,
  repeat,
  seedFromEnv,
  startLoadRuns,
  waitForLoadRuns,
} from "../reliability/harness.ts";
import {
  bouncerFor,
  childLogs,
  spawnLoadWorker,
  stopWorkers,
  withOwnServerBehindBouncer,
} from "./harness.ts";

const db = testDatabase(import.meta.url);

/** Waits until at least `n` tasks have completed. */
function underWay(sql: postgres.Sql, n: number): Promise<unknown> {
  return waitFor(
    () =>
      sql<
        { n: number }[]
      >`select count(*)::int as n from pgflow.step_tasks where status = 'completed'`
        .then(([r]) => r.n >= n),
    { what: `${n} completed tasks`, timeoutMs: 60_000 },
  );
}

/**
 * Runs `fn` while tasks stuck longer than 8 s (a dead worker's, a lost claim's) are aged, so
 * recovery does not wait for timeout + 30 s. 8 s is longer than any live handler here takes,
 * reconnects included: aging a live one would let its late execution count twice.
 */
async function withBackdating(sql: postgres.Sql, fn: () => Promise<void>): Promise<number> {
  let backdated = 0;
  const stop = repeat(300, async () => (backdated += await backdateStuck(sql, 8000)));
  try {
    await fn();
  } finally {
    await stop();
  }
  return backdated;
}

db.test(
  "a worker process killed mid-batch: the others take its tasks back",
  async ({ sql, url }) => {
    const seed = seedFromEnv();
    await createExecLog(sql);
    const bouncer = await bouncerFor(url);
    const children: Child[] = [];
    try {
      for (const queue of [...QUEUES, ...QUEUES]) {
        children.push(
          await spawnLoadWorker(sql, bouncer.via(url), {
            queue,
            seed,
            failRate: 0.05,
            delayMs: 40,
          }),
        );
      }
      await startLoadRuns(sql, 20);
      await underWay(sql, 30);
      await killChild(children[0], "SIGKILL");
      const backdated = await withBackdating(sql, () => waitForLoadRuns(sql, 180_000));
      const figures = await checkInvariants(sql);
      console.log(JSON.stringify({ seed, backdated, ...figures }));
      assert.equal(figures.runs, 20);
      assert.deepEqual(await stopWorkers(children.slice(1)), [0, 0, 0]);
    } finally {
      await stopWorkers(children);
      await bouncer.destroy();
    }
  },
  { fresh: true },
);

db.test("PgBouncer restarted mid-run: workers reconnect and finish", async ({ sql, url }) => {
  const seed = seedFromEnv();
  await createExecLog(sql);
  const bouncer = await bouncerFor(url);
  const children: Child[] = [];
  try {
    for (const queue of QUEUES) {
      children.push(
        await spawnLoadWorker(sql, bouncer.via(url), { queue, seed, failRate: 0.05, delayMs: 20 }),
      );
    }
    await startLoadRuns(sql, 20);
    await underWay(sql, 30);
    await bouncer.stop();
    await new Promise((r) => setTimeout(r, 1500));
    await bouncer.start();
    const backdated = await withBackdating(sql, () => waitForLoadRuns(sql, 180_000)).catch(
      async (error) => {
        // What the workers and PgBouncer last said, to tell a wedged worker from a dead one.
        const said = childLogs(children).filter((l) => l.level !== "debug").slice(-30);
        console.error(JSON.stringify({
          workers: said,
          lastOutput: children.map((c) => c.output().slice(-1500)),
          bouncer: (await bouncer.log()).slice(-3000),
        }));
        throw error;
      },
    );
    const figures = await checkInvariants(sql);
    console.log(JSON.stringify({ seed, backdated, ...figures }));
    assert.equal(figures.runs, 20);
    // The outage was seen and logged, with queue and worker, and the workers carried on.
    const errors = childLogs(children).filter((l) => l.level === "error" || l.level === "warn");
    assert.ok(errors.length > 0, "the workers saw the outage");
    assert.ok(errors.every((l) => typeof l.queue === "string" && typeof l.worker === "string"));
    assert.deepEqual(await stopWorkers(children), [0, 0]);
  } finally {
    await stopWorkers(children);
    await bouncer.destroy();
  }
}, { fresh: true });

Deno.test("Postgres restarted behind PgBouncer: workers ride it out", async () => {
  await withOwnServerBehindBouncer(async (pg, bouncer) => {
    const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
    const children: Child[] = [];
    try {
      await installPgmq(sql);
      await applyMigrations(sql);
      await createExecLog(sql);
      const seed = seedFromEnv();
      for (const queue of QUEUES) {
        children.push(
          await spawnLoadWorker(sql, bouncer.via(pg.url), {
            queue,
            seed,
            failRate: 0.05,
            delayMs: 20,
          }),
        );
      }
      await startLoadRuns(sql, 20);
      await underWay(sql, 30);
      await pg.stop();
      await new Promise((r) => setTimeout(r, 1500));
      await pg.start();
      const backdated = await withBackdating(sql, () => waitForLoadRuns(sql, 180_000));
      const figures = await checkInvariants(sql);
      console.log(JSON.stringify({ seed, backdated, ...figures }));
      assert.equal(figures.runs, 20);
      assert.deepEqual(await stopWorkers(children), [0, 0]);
    } finally {
      await stopWorkers(children);
      await sql.end({ timeout: 1 });
    }
  });
});
