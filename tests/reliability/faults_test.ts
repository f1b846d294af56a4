/**
 * Faults while work is running: a worker process killed with SIGKILL mid-batch, backends
 * terminated (`pg_terminate_backend`) while they claim and while they complete, and a claim whose
 * reply never reaches its worker. Workers recover on their own; afterwards the invariants hold
 * (nothing lost, no attempt executed twice). Recovery waits are shortened by backdating
 * `started_at` of tasks that are stuck, instead of waiting timeout + 30 s.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { readAndStart, registerWorker } from "../support/engine.ts";
import { startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { killChild, spawnDeno } from "../e2e/process.ts";
import {
  backdateStuck,
  checkInvariants,
  createExecLog,
  LOAD_FLOWS,
  loadV1,
  loadV2,
  QUEUES,
  repeat,
  seedFromEnv,
  startLoadRuns,
  waitForLoadRuns,
} from "./harness.ts";

const db = testDatabase(import.meta.url);
const script = new URL("./fixtures/load_worker.ts", import.meta.url).pathname;

function startWorkers(
  registry: FlowWorker[],
  url: string,
  load: { failRate: number; seed: number; delayMs: number },
) {
  return Promise.all(QUEUES.map((queue) =>
    startWorker(registry, [loadV1, loadV2], {
      connectionString: url,
      queueName: queue,
      maxConcurrent: 8,
      batchSize: 8,
      visibilityTimeout: 2,
      stalledRecoveryIntervalMs: 200,
      context: { load },
    })
  ));
}

db.test(
  "a worker process killed with SIGKILL mid-batch: its tasks are recovered, none run twice",
  async ({ sql, url }) => {
    await createExecLog(sql);
    const seed = seedFromEnv();
    // The doomed process hangs in every handler, so its whole batch is in flight when it dies.
    const child = spawnDeno(script, {
      DATABASE_URL: url,
      FUNCTION_NAME: "doomed",
      DELAY_MS: "600000",
      MAX_CONCURRENT: "6",
    });
    const workers: FlowWorker[] = [];
    try {
      await waitFor(
        () =>
          sql`select 1 from pgflow.workers where function_name = 'doomed'`.then((r) =>
            r.length === 2
          ),
        { what: `the doomed process to register; output:\n${child.output()}`, timeoutMs: 60_000 },
      );
      await startLoadRuns(sql, 20);
      await waitFor(async () => {
        const [{ n }] = await sql`
        select count(*)::int as n from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
        where w.function_name = 'doomed' and t.status = 'started'`;
        return n >= 6;
      }, { what: "the doomed process to hold a batch" });
      await killChild(child, "SIGKILL");
      const held = await sql`
      select t.run_id, t.step_slug, t.task_index from pgflow.step_tasks t
      join pgflow.workers w on w.worker_id = t.last_worker_id
      where w.function_name = 'doomed' and t.status = 'started'`;

      await startWorkers(workers, url, { failRate: 0.1, seed, delayMs: 0 });
      // The dead process's tasks are stuck (its handlers hung); survivors' handlers take ms.
      let backdated = 0;
      const stopBackdating = repeat(300, async () => (backdated += await backdateStuck(sql, 2000)));
      try {
        await waitForLoadRuns(sql, 180_000);
      } finally {
        await stopBackdating();
      }
      await stopAll(workers);
      const figures = await checkInvariants(sql);
      console.log(JSON.stringify({ seed, inFlight: held.length, backdated, ...figures }));
      // Every task the dead process held was taken back and tried again (or its run failed).
      const after = await sql`
      select t.attempts_count, t.status, r.status as run_status
      from jsonb_to_recordset(${
        sql.json(held as never)
      }) h(run_id uuid, step_slug text, task_index int)
      join pgflow.step_tasks t using (run_id, step_slug, task_index)
      join pgflow.runs r using (run_id)`;
      assert.equal(after.length, held.length);
      for (const t of after) {
        assert.ok(t.attempts_count >= 2 || t.run_status === "failed", JSON.stringify(t));
      }
      assert.ok(after.filter((t) => t.attempts_count >= 2).length > 0);
    } finally {
      await killChild(child);
      await stopAll(workers);
    }
  },
  { fresh: true },
);

/**
 * Holds a lock until a backend running `pattern` waits on it, then terminates every such backend
 * and releases the lock: the backends die inside the claim or the completion, before it commits.
 * Claims (a worker's read_and_claim, which runs start_tasks) are trapped by an ACCESS EXCLUSIVE
 * lock on pgflow.flows (start_tasks reads it, completions do not, so they keep freeing pool
 * connections); completions and failures by row locks on the started runs (they lock their run
 * first; claims never lock runs). A claim killed there takes its read with it.
 */
async function terminateWhileWaiting(
  trap: postgres.Sql,
  sql: postgres.Sql,
  pattern: string,
  lock: "flows table" | "run rows",
  timeoutMs = 10_000,
): Promise<number> {
  const result = await trap.begin(async (tx) => {
    if (lock === "flows table") await tx`lock table pgflow.flows in access exclusive mode`;
    // In run_id order, as complete_tasks locks them: any other order can deadlock with a batch.
    else await tx`select 1 from pgflow.runs where status = 'started' order by run_id for update`;
    const pids = await waitFor(async () => {
      const rows = await sql<{ pid: number }[]>`
        select pid from pg_stat_activity
        where datname = current_database() and wait_event_type = 'Lock' and query ~ ${pattern}`;
      return rows.length > 0 && rows.map((r) => r.pid);
    }, { what: `a backend running ${pattern} to wait on the lock`, timeoutMs }).catch(() => []);
    const [{ n }] = await sql`
      select count(*) filter (where pg_terminate_backend(pid))::int as n
      from unnest(${pids}::int[]) pid`;
    return n as number;
  });
  return result as number;
}

/**
 * Starts runs and traps `pattern` until at least one backend was terminated: on a fast machine the
 * workers can finish a round's runs before the trap's lock is taken, leaving nothing to catch, so
 * a round with no catch starts more runs and tries again (up to 10 times: on a busy machine a
 * worker can be between polls for a whole try). Returns the terminations and the runs
 * started.
 */
async function trapRound(
  trap: postgres.Sql,
  sql: postgres.Sql,
  pattern: string,
  lock: "flows table" | "run rows",
): Promise<{ terminated: number; runs: number }> {
  for (let attempt = 1, runs = 0;; attempt++) {
    await startLoadRuns(sql, 10);
    runs += 10;
    const terminated = await terminateWhileWaiting(trap, sql, pattern, lock, 5_000);
    if (terminated > 0 || attempt === 10) return { terminated, runs };
  }
}

db.test(
  "backends terminated mid-claim and mid-complete: workers reconnect, nothing lost or doubled",
  async ({ sql, url, connect }) => {
    await createExecLog(sql);
    const seed = seedFromEnv();
    const workers: FlowWorker[] = [];
    const trap = connect();
    try {
      await startWorkers(workers, url, { failRate: 0.1, seed, delayMs: 0 });
      let claims = 0;
      let completions = 0;
      let runs = 0;
      for (let round = 0; round < 3; round++) {
        // Fresh runs each round, so claims and completions are certain to come.
        const claimed = await trapRound(
          trap,
          sql,
          "pgflow\\.(read_and_claim|start_tasks)",
          "flows table",
        );
        const completed = await trapRound(trap, sql, "pgflow\\.(complete|fail)_task", "run rows");
        claims += claimed.terminated;
        completions += completed.terminated;
        runs += claimed.runs + completed.runs;
      }
      const stopBackdating = repeat(300, () => backdateStuck(sql, 3000));
      try {
        await waitForLoadRuns(sql, 180_000);
      } finally {
        await stopBackdating();
      }
      await stopAll(workers);
      const figures = await checkInvariants(sql);
      console.log(JSON.stringify({ seed, claims, completions, ...figures }));
      assert.ok(
        claims >= 3 && completions >= 3,
        `terminated ${claims} claims, ${completions} completions`,
      );
      assert.equal(figures.completedRuns + figures.failedRuns, runs);
    } finally {
      await stopAll(workers);
    }
  },
  { fresh: true },
);

db.test(
  "a claim whose reply is lost is not run by anyone until stalled recovery takes it back",
  async ({ sql, url }) => {
    await createExecLog(sql);
    const workers: FlowWorker[] = [];
    try {
      await startWorkers(workers, url, { failRate: 0, seed: 0, delayMs: 0 });
      await stopAll(workers.splice(0));
      const [run] = await startLoadRuns(sql, 1);
      // A "worker" claims the root task and never hears back (its connection died after commit).
      const ghost = await registerWorker(sql, "rel_a");
      const rows = await readAndStart(sql, "rel_a", ghost, [[LOAD_FLOWS[0], "split"]]);
      assert.deepEqual(rows.map((r) => r.disposition), ["claimed"]);
      // Make the message visible again, as if the claim's visibility had run out early.
      await sql`select pgmq.set_vt('rel_a', ${rows[0].message_id}::bigint, 0)`;

      const [{ logs }] = await startWorkers(workers, url, { failRate: 0, seed: 0, delayMs: 0 });
      await waitFor(() => logs.some((l) => l.event === "message not claimed (started)"), {
        what: "a worker to see the started task and leave it",
      });
      const [before] = await sql`select count(*)::int as n from public.rel_exec`;
      assert.equal(before.n, 0, "nobody ran the task while its claim stood");
      await sql`update pgflow.step_tasks set started_at = started_at - interval '1 hour'
              where run_id = ${run}::uuid and step_slug = 'split'`;
      assert.equal((await waitForRun(sql, run)).status, "completed");
      const [split] = await sql`select attempts_count from pgflow.step_tasks
                              where run_id = ${run}::uuid and step_slug = 'split'`;
      assert.equal(split.attempts_count, 2);
      const execs = await sql`select attempt from public.rel_exec where step_slug = 'split'`;
      assert.deepEqual(execs.map((e) => e.attempt), [2]);
      await stopAll(workers);
      await checkInvariants(sql);
    } finally {
      await stopAll(workers);
    }
  },
  { fresh: true },
);
