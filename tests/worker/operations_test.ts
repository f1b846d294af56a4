/** Operator tools with real workers: coverage sees what workers serve; the deploy fence drains them. */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { queueCoverage } from "../../tools.ts";

import { testDatabase, waitFor } from "../support/db.ts";
import { runRow, startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("a running worker's support set shows in the coverage check; a stopped one does not", async ({ sql, url }) => {
  const flow = new Flow<{ n: number }>({ slug: "ops_cov" })
    .step({ slug: "a" }, (i) => i.n)
    .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
  const routed = routeFlow(flow, { queues: { a: "ops_cov_main", b: "ops_cov_side" } });
  const workers: FlowWorker[] = [];
  const { worker } = await startWorker(workers, [routed], {
    connectionString: url,
    queueName: "ops_cov_main",
  });
  const lines = async () =>
    (await queueCoverage(sql)).map((r) => `${r.queueName} ${r.stepSlug} ${r.served}`);
  assert.deepEqual(await lines(), ["ops_cov_main a true", "ops_cov_side b false"]);
  await worker.stop();
  assert.deepEqual(await lines(), ["ops_cov_main a false", "ops_cov_side b false"]);
  await stopAll(workers);
});

db.test("a fenced function's workers drain, and no new worker registers until the flags are restored", async ({ sql, url }) => {
  let release!: () => void;
  const gate = new Promise<void>((r) => release = r);
  const flow = new Flow<{ n: number }>({ slug: "ops_fence" }).step({ slug: "slow" }, async (i) => {
    if (i.n === 1) await gate;
    return i.n;
  });
  const workers: FlowWorker[] = [];
  const config = { connectionString: url, functionName: "fenced_fn", heartbeatIntervalMs: 100 };
  const { worker } = await startWorker(workers, flow, config);
  const inFlight = await startRun(sql, "ops_fence", { n: 1 });
  await waitFor(() => worker.inFlight === 1, { what: "the slow task to start" });

  const [{ fence }] = await sql`select pgflow.begin_deploy_fence('{fenced_fn}') as fence`;
  // Deprecated through its heartbeat: it stops polling but finishes what it holds.
  await waitFor(() => worker.state === "draining", { what: "the worker to drain" });
  const [fenced] = await sql`select * from pgflow.deploy_fence_status(${fence})`;
  assert.equal(Number(fenced.started_tasks), 1);
  release();
  assert.equal((await waitForRun(sql, inFlight)).status, "completed");
  await worker.done;
  assert.equal(worker.state, "stopped");
  await waitFor(
    async () => (await sql`select drained from pgflow.deploy_fence_status(${fence})`)[0].drained,
    {
      what: "the fence to report drained",
    },
  );
  // A read already under way when the deprecation arrived may still be claimed (those messages
  // are reserved for this worker); work started after the drain waits for the next deploy.
  const queued = await startRun(sql, "ops_fence", { n: 2 });
  await new Promise((r) => setTimeout(r, 300));
  assert.equal((await runRow(sql, queued)).status, "started", "nobody took the new run");

  // The refusal names the open fence and the call that ends it (Postgres's HINT included).
  await assert.rejects(
    startWorker(workers, flow, config),
    new RegExp(
      `worker function fenced_fn is disabled by open deploy fence ${fence} .*` +
        `hint: .*select pgflow\\.end_deploy_fence\\(${fence}\\)`,
    ),
  );

  await sql`select pgflow.end_deploy_fence(${fence})`;
  await startWorker(workers, flow, config);
  assert.equal((await waitForRun(sql, queued)).status, "completed");
  await stopAll(workers);
});

db.test("a worker a deploy fence refuses leaves no connection open, the LISTEN it opened meanwhile included", async ({ sql, url }) => {
  // The LISTEN opens while the worker registers, so a refused registration must still close it.
  const flow = new Flow<{ n: number }>({ slug: "ops_fence_listen" }).step(
    { slug: "a" },
    (i) => i.n,
  );
  const [{ fence }] = await sql`select pgflow.begin_deploy_fence('{fenced_listen_fn}') as fence`;
  const workers: FlowWorker[] = [];
  try {
    await assert.rejects(
      startWorker(workers, flow, { connectionString: url, functionName: "fenced_listen_fn" }),
      /disabled by open deploy fence/,
    );
    await waitFor(async () => {
      const [{ n }] = await sql`select count(*)::int as n from pg_stat_activity
                                where datname = current_database() and pid <> pg_backend_pid()`;
      return n === 0;
    }, { what: "the refused worker's connections (pool and LISTEN) to close" });
  } finally {
    await sql`select pgflow.end_deploy_fence(${fence})`;
    await stopAll(workers);
  }
});
