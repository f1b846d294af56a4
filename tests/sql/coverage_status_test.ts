/**
 * pgflow.queue_coverage's statuses: work waiting (queued or started tasks in started runs) versus
 * routes that merely exist, and started tasks held by a worker that is gone.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function register(sql: Sql, queue: string, supported: [string, string][]) {
  const id = crypto.randomUUID();
  await sql`select pgflow.register_worker(${id}, ${queue}, 'fn_cs', ${sql.json(supported)})`;
  return id;
}

async function statuses(sql: Sql, queue: string, staleAfter = "30 seconds") {
  const rows = await sql`select * from pgflow.queue_coverage(${queue}, ${staleAfter}::interval)`;
  return Object.fromEntries(rows.map((r) => [
    `${r.flow_slug}.${r.step_slug}`,
    `${r.status} q${r.queued_tasks} s${r.started_tasks} stale${r.stale_tasks} w${r.live_workers}`,
  ]));
}

db.test("retired flows' routes are idle; finished runs are no work", async ({ sql }) => {
  await defineFlow(sql, "cs_old", [{ slug: "a", queue: "cs_q" }], { mode: "routed" });
  await defineFlow(sql, "cs_new", [{ slug: "a", queue: "cs_q" }], { mode: "routed" });
  // An old run that completed and one that failed leave tasks behind that are no work.
  const [done] = await sql`select run_id from pgflow.start_flow('cs_old', '{}')`;
  const [gone] = await sql`select run_id from pgflow.start_flow('cs_old', '{}')`;
  await sql`update pgflow.runs set status = 'completed' where run_id = ${done.run_id}`;
  await sql`update pgflow.runs set status = 'failed' where run_id = ${gone.run_id}`;
  await register(sql, "cs_q", [["cs_new", "a"]]);
  assert.deepEqual(await statuses(sql, "cs_q"), {
    "cs_new.a": "ok q0 s0 stale0 w1",
    "cs_old.a": "idle q0 s0 stale0 w0",
  });
  // A run of the old flow starts: now its pair has work waiting and no worker.
  await sql`select pgflow.start_flow('cs_old', '{}')`;
  assert.equal((await statuses(sql, "cs_q"))["cs_old.a"], "MISSING q1 s0 stale0 w0");
});

db.test("a started task whose worker is gone is STALE while a live worker serves the pair", async ({ sql }) => {
  await defineFlow(sql, "cs_stale", [{ slug: "a", queue: "cs_sq" }], { mode: "routed" });
  await sql`select pgflow.start_flow('cs_stale', '{}')`;
  await sql`select pgflow.start_flow('cs_stale', '{}')`;
  const pair: [string, string][] = [["cs_stale", "a"]];
  const dead = await register(sql, "cs_sq", pair);
  await readAndStart(sql, "cs_sq", dead, pair, 1);
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "ok q1 s1 stale0 w1");

  // The worker stops beating: its started task is held by nobody that is seen.
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '1 minute'
            where worker_id = ${dead}`;
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "MISSING q1 s1 stale1 w0");
  const live = await register(sql, "cs_sq", pair);
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "STALE q1 s1 stale1 w1");
  // stale_after decides what "seen" means.
  assert.equal((await statuses(sql, "cs_sq", "2 minutes"))["cs_stale.a"], "ok q1 s1 stale0 w2");

  // A stopped worker, or a task that names no worker row, is gone too.
  await sql`update pgflow.workers set last_heartbeat_at = now() where worker_id = ${dead}`;
  await sql`select pgflow.mark_worker_stopped(${dead})`;
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "STALE q1 s1 stale1 w1");
  await sql`update pgflow.step_tasks set last_worker_id = null where status = 'started'`;
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "STALE q1 s1 stale1 w1");

  // A deprecated worker still finishes what it holds: not stale, but not live either.
  await sql`update pgflow.step_tasks set last_worker_id = ${live} where status = 'started'`;
  await sql`update pgflow.workers set deprecated_at = now() where worker_id = ${live}`;
  assert.equal((await statuses(sql, "cs_sq"))["cs_stale.a"], "MISSING q1 s1 stale0 w0");
});

db.test("a pair that only some live workers of its queue serve is PARTIAL; deprecated workers do not count", async ({ sql }) => {
  await defineFlow(sql, "cs_v1", [{ slug: "a", queue: "cs_mixed" }], { mode: "routed" });
  await defineFlow(sql, "cs_v2", [{ slug: "a", queue: "cs_mixed" }], { mode: "routed" });
  // The moment of a deploy: the old worker serves v1, the new one v1 and v2.
  const old = await register(sql, "cs_mixed", [["cs_v1", "a"]]);
  await register(sql, "cs_mixed", [["cs_v1", "a"], ["cs_v2", "a"]]);
  assert.deepEqual(await statuses(sql, "cs_mixed"), {
    "cs_v1.a": "ok q0 s0 stale0 w2",
    "cs_v2.a": "PARTIAL q0 s0 stale0 w1",
  });
  // Work waiting without any live worker is still MISSING first.
  await sql`update pgflow.workers set deprecated_at = now() where queue_name = 'cs_mixed'
              and worker_id <> ${old}::uuid`;
  await sql`select pgflow.start_flow('cs_v2', '{}')`;
  assert.deepEqual(await statuses(sql, "cs_mixed"), {
    "cs_v1.a": "ok q0 s0 stale0 w1",
    "cs_v2.a": "MISSING q1 s0 stale0 w0",
  });
  // The old worker drained away: the new one alone serves everything.
  await sql`update pgflow.workers set deprecated_at = now() where worker_id = ${old}::uuid`;
  await register(sql, "cs_mixed", [["cs_v1", "a"], ["cs_v2", "a"]]);
  assert.deepEqual(await statuses(sql, "cs_mixed"), {
    "cs_v1.a": "ok q0 s0 stale0 w1",
    "cs_v2.a": "ok q1 s0 stale0 w1",
  });
});

db.test("a NULL staleness is the live window: coverage and the fence's status see the same live workers as the claim", async ({ sql }) => {
  await defineFlow(sql, "cs_window", [{ slug: "a", queue: "cs_wq" }], { mode: "routed" });
  await sql`select pgflow.start_flow('cs_window', '{}')`;
  const pair: [string, string][] = [["cs_window", "a"]];
  // A function of their own, so the fence's status counts these two only.
  const [fresh, silent] = [crypto.randomUUID(), crypto.randomUUID()];
  for (const id of [fresh, silent]) {
    await sql`select pgflow.register_worker(${id}, 'cs_wq', 'fn_cs_window', ${sql.json(pair)})`;
  }
  // 20 s without a heartbeat is within the live window (30 s); 40 s is not.
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '20 seconds'
            where worker_id = ${fresh}`;
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '40 seconds'
            where worker_id = ${silent}`;
  for (const call of ["pgflow.queue_coverage('cs_wq', null)", "pgflow.queue_coverage('cs_wq')"]) {
    const [row] = await sql.unsafe(`select live_workers::int as n, status from ${call}`);
    assert.deepEqual([row.n, row.status], [1, "ok"], call);
  }
  const fence = await sql`select pgflow.begin_deploy_fence('{fn_cs_window}') as id`;
  for (const arg of [", null", ""]) {
    const [row] = await sql.unsafe(
      `select live_workers::int as n from pgflow.deploy_fence_status(${fence[0].id}${arg})`,
    );
    assert.equal(row.n, 1, `deploy_fence_status(fence${arg})`);
  }
  await sql`select pgflow.end_deploy_fence(${fence[0].id})`;
  const [window] = await sql`select extract(epoch from pgflow._live_window())::int as s`;
  assert.equal(window.s, 30);
});
