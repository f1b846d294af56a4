/**
 * A worker process killed with SIGKILL mid-task: the surviving worker's periodic recovery takes the
 * task back once it is older than timeout + 30 s, and the task completes on the survivor.
 */
import assert from "node:assert/strict";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { killChild, spawnDeno } from "./process.ts";
import { recoveryFlow } from "./fixtures/recovery_flow.ts";

const db = testDatabase(import.meta.url);
const script = new URL("./fixtures/hanging_worker.ts", import.meta.url).pathname;

db.test("a task of a killed worker is recovered and completes", async ({ sql, url }) => {
  const child = spawnDeno(script, { DATABASE_URL: url, HANG: "1" });
  const workers: FlowWorker[] = [];
  try {
    const [doomed] = await waitFor(
      () =>
        sql<{ worker_id: string }[]>`select worker_id from pgflow.workers
        where queue_name = 'recovery_flow'`.then((rows) => rows.length > 0 && rows),
      { what: `the child worker to register; output:\n${child.output()}`, timeoutMs: 60_000 },
    );
    const run = await startRun(sql, "recovery_flow", { id: "r1" });
    await waitFor(
      () =>
        sql`select 1 from pgflow.step_tasks where run_id = ${run}::uuid and status = 'started'
            and last_worker_id = ${doomed.worker_id}::uuid`.then((rows) => rows.length > 0),
      { what: "the child to start the task" },
    );
    await killChild(child, "SIGKILL");

    const { worker: survivor, logs } = await startWorker(workers, recoveryFlow, {
      connectionString: url,
      stalledRecoveryIntervalMs: 100,
      env: { HANG: "0", WORKER_NAME: "survivor" },
    });
    // Recovery passes run, but the task is younger than timeout + 30 s: it stays with the dead worker.
    // The wait also outlasts the killed worker's last read: Postgres finishes a read_with_poll whose
    // client died (up to maxPollSeconds) and would hide a requeued message for visibilityTimeout.
    await new Promise((r) => setTimeout(r, 1200));
    const [young] =
      await sql`select status, attempts_count from pgflow.step_tasks where run_id = ${run}::uuid`;
    assert.deepEqual({ ...young }, { status: "started", attempts_count: 1 });

    // Age the task past timeout (3 s) + 30 s instead of waiting 33 s.
    await sql`update pgflow.step_tasks set started_at = started_at - interval '40 seconds'
              where run_id = ${run}::uuid`;
    assert.deepEqual(await waitForRun(sql, run), {
      status: "completed",
      output: { work: { recovered: "r1", by: "survivor" } },
    });
    const [task] = await sql`
      select attempts_count, last_worker_id from pgflow.step_tasks where run_id = ${run}::uuid`;
    assert.deepEqual({ ...task }, { attempts_count: 2, last_worker_id: survivor.id });
    assert.ok(logs.some((l) => l.event === "stalled tasks recovered"));
  } finally {
    await killChild(child);
    await stopAll(workers);
  }
});
