/**
 * The keep-alive loop end to end, with nothing started by hand: Debian's real pg_cron runs the job
 * `pgflow.schedule_maintenance()` created; `ensure_workers()` finds both example functions (listed
 * as the getting-started guide says) without a live worker and pings them with `net.http_post`
 * (the test-only pg_net; the URL and secret from Vault, as the guide says, through the Vault
 * stand-in); the relay delivers the pings to the runtime stand-in, which starts one isolate per
 * function; their workers register and finish runs of both triage versions.
 *
 * Debian's pg_cron is 1.4, which runs jobs at most once a minute: the job is scheduled every
 * minute, so this test waits up to a minute for the first tick.
 */
import assert from "node:assert/strict";
import { waitFor } from "../support/db.ts";
import { startRun, waitForRun } from "../worker/helpers.ts";
import { startEdgeCluster } from "./cluster.ts";
import { SECRET, workerFunction } from "./functions.ts";
import { startRelay } from "./relay.ts";
import { EdgeSupervisor } from "./runtime/supervisor.ts";

Deno.test("pg_cron runs ensure_workers, pg_net's ping reaches the function, its worker starts and runs flows", async () => {
  const cluster = await startEdgeCluster({ cron: true });
  const { sql } = cluster;
  const functions = ["thread_processing", "slack_delivery"].map((name) =>
    workerFunction(name, cluster.url)
  );
  const supervisor = new EdgeSupervisor({ functions });
  await supervisor.start();
  const relay = startRelay(sql, supervisor.url);
  try {
    // As the getting-started guide says: the project URL and the trigger's secret in Vault, the
    // functions listed for the keep-alive, the schedule.
    await sql`select vault.create_secret(${supervisor.url}, 'supabase_project_url')`;
    await sql`select vault.create_secret(${SECRET}, 'pgflow_auth_secret')`;
    await sql`insert into pgflow.worker_functions (function_name)
              values ('thread_processing'), ('slack_delivery') on conflict do nothing`;
    // Debian's pg_cron is 1.4: seconds are refused with the fix named, whole minutes are cron.
    await assert.rejects(
      sql`select pgflow.schedule_maintenance('5 seconds')`,
      /keep_alive 00:00:05 needs pg_cron 1\.5 or later/,
    );
    await sql`select pgflow.schedule_maintenance('1 minute')`;
    const jobs = await sql<{ jobname: string; schedule: string }[]>`
      select jobname, schedule from cron.job order by jobname`;
    assert.deepEqual(jobs.map((j) => [j.jobname, j.schedule]), [
      ["pgflow_ensure_workers", "* * * * *"],
      // With a keep-alive of a minute, schedules are ticked each minute by pg_cron (workers too).
      ["pgflow_fire_due_schedules", "* * * * *"],
      ["pgflow_requeue_stalled_tasks", "* * * * *"],
    ]);

    // Nothing but pg_cron starts the workers.
    const workers = await waitFor(async () => {
      const rows = await sql<{ function_name: string; worker_id: string }[]>`
        select function_name, worker_id::text from pgflow.workers order by function_name`;
      return rows.length === 2 ? rows : undefined;
    }, { what: "pg_cron's keep-alive to start both workers", timeoutMs: 100_000, intervalMs: 250 });
    assert.deepEqual(workers.map((w) => w.function_name), ["slack_delivery", "thread_processing"]);
    const [run] = await sql<{ status: string }[]>`
      select d.status from cron.job_run_details d join cron.job j on j.jobid = d.jobid
      where j.jobname = 'pgflow_ensure_workers' order by d.runid limit 1`;
    assert.equal(run.status, "succeeded");
    for (const name of ["thread_processing", "slack_delivery"]) {
      // A worker registers while its ping is still being answered: wait for the answer.
      const delivered = await waitFor(() => {
        const ds = relay.deliveries.filter((d) => d.url.endsWith(`/functions/v1/${name}`));
        return ds.length > 0 && ds.every((d) => d.body !== undefined) ? ds : undefined;
      }, { what: `the answer to ${name}'s ping`, timeoutMs: 60_000 });
      assert.equal(delivered.length, 1, `one ping for ${name}`);
      assert.equal(delivered[0].status, 200, delivered[0].body);
      assert.equal(JSON.parse(delivered[0].body!).status, "started");
    }
    // Each worker runs in the isolate its ping started (the worker id is its SB_EXECUTION_ID).
    for (const w of workers) {
      assert.equal(supervisor.current(w.function_name)?.id, w.worker_id);
    }

    const v1 = await startRun(sql, "thread_triage_v1", { threadId: "k1", text: "site is down" });
    const v2 = await startRun(sql, "thread_triage_v2", { threadId: "k2", text: "a question" });
    assert.equal((await waitForRun(sql, v1)).status, "completed");
    assert.equal((await waitForRun(sql, v2)).status, "completed");
  } finally {
    await relay.stop();
    await supervisor.stop();
    await cluster.destroy();
  }
});
