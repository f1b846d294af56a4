/**
 * The seed scenario through PgBouncer in transaction mode (the stand-in for Supavisor on port
 * 6543), with worker processes: four workers, two per shared queue, run two versions of a map flow
 * (grouped steps on both queues) with injected failures and retries, next to a version no worker
 * serves and foreign messages; then one version is deleted while the other's runs are in flight.
 * Every run ends, no attempt runs twice, nothing hangs, and every worker stops cleanly.
 */
import assert from "node:assert/strict";
import type { Child } from "../e2e/process.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { startRun } from "../worker/helpers.ts";
import {
  checkInvariants,
  createExecLog,
  LOAD_FLOWS,
  orphan,
  ORPHAN_FLOW,
  QUEUES,
  seedFromEnv,
  sendForeignMessages,
  startLoadRuns,
  waitForLoadRuns,
} from "../reliability/harness.ts";
import { assertNoWedge, bouncerFor, spawnLoadWorker, stopWorkers } from "./harness.ts";
import { runBehindBacklog } from "../worker/fixtures/neighbour_backlog.ts";

const db = testDatabase(import.meta.url);

db.test("shared queues through a transaction pooler: every run ends, once", async ({ sql, url }) => {
  const seed = seedFromEnv();
  console.log(`pooler seed ${seed} (replay with RELIABILITY_SEED=${seed})`);
  await createExecLog(sql);
  assert.equal((await compileFlow(sql, orphan)).status, "compiled");
  const bouncer = await bouncerFor(url, "transaction");
  const children: Child[] = [];
  try {
    for (const queue of [...QUEUES, ...QUEUES]) {
      children.push(
        await spawnLoadWorker(sql, bouncer.via(url), { queue, seed, failRate: 0.1 }),
      );
    }
    const orphanRun = await startRun(sql, ORPHAN_FLOW, { n: 1 });
    const runs = await startLoadRuns(sql, 30);
    const foreign = await sendForeignMessages(sql, runs[0]);
    await waitForLoadRuns(sql, 180_000);
    const figures = await checkInvariants(sql, foreign);
    console.log(JSON.stringify(figures));
    assert.equal(figures.completedRuns + figures.failedRuns, 30);
    assert.ok(figures.completedRuns > 0 && figures.injectedFailures > 0);

    // Delete v1 while v2's runs are under way: v2 finishes, workers carry on.
    const [v1, v2] = LOAD_FLOWS;
    const v2Runs: string[] = [];
    for (let i = 0; i < 10; i++) v2Runs.push(await startRun(sql, v2, { n: 8 }));
    await sql`select pgflow.delete_flow_and_data(${v1})`;
    await waitForLoadRuns(sql, 60_000, "v2 runs after deleting v1");
    const left = await sql`select count(*)::int as n from pgflow.runs where flow_slug = ${v1}`;
    assert.equal(left[0].n, 0);
    const ended = await sql<{ status: string }[]>`
      select status from pgflow.runs where run_id = any (${v2Runs}::uuid[])`;
    assert.ok(ended.every((r) => r.status !== "started"));
    const twice = await sql`
      select run_id, step_slug, task_index, attempt from public.rel_exec
      group by 1, 2, 3, 4 having count(*) > 1`;
    assert.deepEqual([...twice], [], "no attempt ran twice");
    // The unserved version's task was never touched.
    const [orphanTask] = await sql`
      select status, attempts_count from pgflow.step_tasks where run_id = ${orphanRun}::uuid`;
    assert.deepEqual({ ...orphanTask }, { status: "queued", attempts_count: 0 });

    const codes = await stopWorkers(children);
    assert.deepEqual(codes, [0, 0, 0, 0], "every worker stopped cleanly");
    const [{ running }] = await sql<{ running: number }[]>`
      select count(*)::int as running from pgflow.workers where stopped_at is null`;
    assert.equal(running, 0, "every worker marked itself stopped through the pooler");
    await assertNoWedge(bouncer, children);
  } finally {
    await stopWorkers(children);
    await bouncer.destroy();
  }
});

db.test("through a transaction pooler, an idle worker behind another flow's backlog completes its runs while most of the backlog waits", async ({ sql, url }) => {
  const bouncer = await bouncerFor(url, "transaction");
  try {
    // Both workers poll (no LISTEN through the pooler); the reads past the backlog go through it.
    const { backlogStarted } = await runBehindBacklog(sql, bouncer.via(url));
    assert.ok(backlogStarted < 750, `${backlogStarted} of the 1,500 had started`);
  } finally {
    await bouncer.destroy();
  }
});
