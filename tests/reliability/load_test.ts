/**
 * Load: 4 workers (2 per queue) on 2 shared queues run 500 tasks of two flow versions with seeded
 * handler failures and retries, next to foreign messages and messages of a flow nobody serves.
 * Afterwards every invariant holds (see harness.checkInvariants), and with no faults injected
 * every claimed attempt was executed exactly once. The 5,000-task version is `deno task soak`.
 */
import assert from "node:assert/strict";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { startRun, startWorker, stopAll } from "../worker/helpers.ts";
import {
  checkInvariants,
  createExecLog,
  loadV1,
  loadV2,
  orphan,
  ORPHAN_FLOW,
  QUEUES,
  seedFromEnv,
  sendForeignMessages,
  startLoadRuns,
  TASKS_PER_RUN,
  waitForLoadRuns,
} from "./harness.ts";

const db = testDatabase(import.meta.url);

db.test("500 tasks on 4 workers and 2 shared queues: nothing lost, nothing run twice", async ({ sql, url }) => {
  const seed = seedFromEnv();
  const failRate = 0.15;
  console.log(`load seed ${seed} (replay with RELIABILITY_SEED=${seed})`);
  await createExecLog(sql);
  assert.equal((await compileFlow(sql, orphan)).status, "compiled");
  const workers: FlowWorker[] = [];
  try {
    for (const queue of [...QUEUES, ...QUEUES]) {
      await startWorker(workers, [loadV1, loadV2], {
        connectionString: url,
        queueName: queue,
        maxConcurrent: 8,
        batchSize: 8,
        visibilityTimeout: 2,
        stalledRecoveryIntervalMs: 500,
        context: { load: { failRate, seed, delayMs: 0 } },
      });
    }
    const orphanRuns = [
      await startRun(sql, ORPHAN_FLOW, { n: 1 }),
      await startRun(sql, ORPHAN_FLOW, { n: 2 }),
    ];
    const runs = await startLoadRuns(sql, 500 / TASKS_PER_RUN);
    const foreign = await sendForeignMessages(sql, runs[0]);
    await waitForLoadRuns(sql, 180_000);
    await stopAll(workers);

    const figures = await checkInvariants(sql, foreign);
    console.log(JSON.stringify(figures));
    // 500 tasks planned; a run whose split exhausts its attempts never creates its later tasks.
    assert.equal(figures.completedRuns + figures.failedRuns, 50);
    assert.ok(figures.tasks <= 500 && figures.tasks > 400, `${figures.tasks} tasks`);
    assert.ok(figures.injectedFailures > 0, "the seed injected failures");
    // No faults: every attempt a worker claimed was executed, exactly once.
    const [{ attempts }] = await sql`
      select sum(attempts_count)::int as attempts from pgflow.step_tasks
      where flow_slug <> ${ORPHAN_FLOW}`;
    assert.equal(figures.executions, attempts);
    // PGMQ's own read is the only thing that touched the orphan's messages.
    const reads = await sql`
      select q.read_ct from pgflow.step_tasks t join pgmq.q_rel_a q on q.msg_id = t.message_id
      where t.run_id = any (${orphanRuns}::uuid[])`;
    assert.equal(reads.length, 2);
    assert.ok(reads.every((r) => r.read_ct >= 1), "the orphan's messages were read, then left");
  } finally {
    await stopAll(workers);
  }
});
