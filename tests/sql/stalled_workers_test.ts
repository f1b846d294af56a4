/** Stalled recovery, its races, set_vt_batch and the worker registry. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function stall(sql: Sql, runId: string, seconds: number) {
  await sql`update pgflow.step_tasks set started_at = now() - make_interval(secs => ${seconds})
            where run_id = ${runId} and status = 'started'`;
}

db.test("a task started more than timeout + 30 s ago is requeued and counts as an attempt", async ({ sql }) => {
  await defineFlow(sql, "stall", [{ slug: "a", queue: "stall_q", timeout: 10, maxAttempts: 2 }], {
    mode: "routed",
    timeout: 99,
  });
  const [run] = await sql`select * from pgflow.start_flow('stall', '{}')`;
  const worker = await registerWorker(sql, "stall_q");
  await readAndStart(sql, "stall_q", worker, [["stall", "a"]]);
  await stall(sql, run.run_id, 39); // step timeout 10 + 30 = 40: not yet
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 0);
  await stall(sql, run.run_id, 41);
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 1);
  const [task] =
    await sql`select status, attempts_count, error_message from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.equal(task.status, "queued");
  assert.equal(task.attempts_count, 1);
  assert.match(task.error_message, /stalled/);
  const [msg] = await queueMessages(sql, "stall_q");
  assert.ok(msg.vt_in_seconds <= 0.5, "visible again at once");

  // The second stall exhausts the attempts: the run fails instead of staying started forever.
  const [row] = await readAndStart(sql, "stall_q", worker, [["stall", "a"]]);
  assert.equal(row.attempt, 2);
  await stall(sql, run.run_id, 41);
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 1);
  const [failed] = await sql`select status from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(failed.status, "failed");
  assert.equal((await queueMessages(sql, "stall_q")).length, 0);
});

db.test("several connections recovering at once handle each stalled task once", async ({ sql, connect }) => {
  await defineFlow(sql, "stall_many", [{ slug: "a", queue: "stall_many_q", maxAttempts: 5 }], {
    mode: "routed",
  });
  for (let i = 0; i < 30; i++) await sql`select pgflow.start_flow('stall_many', '{}')`;
  const worker = await registerWorker(sql, "stall_many_q");
  await readAndStart(sql, "stall_many_q", worker, [["stall_many", "a"]], 30);
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour' where flow_slug = 'stall_many'`;
  const conns = [connect(), connect(), connect()];
  const counts = await Promise.all(conns.map((c) => c`select pgflow.requeue_stalled_tasks() as n`));
  const total = counts.reduce((sum, [{ n }]) => sum + n, 0);
  assert.equal(total, 30);
  const [{ queued, attempts }] =
    await sql`select count(*) filter (where status = 'queued')::int as queued,
                                                  max(attempts_count) as attempts from pgflow.step_tasks
                                           where flow_slug = 'stall_many'`;
  assert.deepEqual([queued, attempts], [30, 1]);
});

db.test("a completion racing stalled recovery has exactly one outcome", async ({ sql, connect }) => {
  await defineFlow(sql, "stall_race", [{ slug: "a", queue: "stall_race_q", maxAttempts: 3 }], {
    mode: "routed",
  });
  const runs = [];
  for (let i = 0; i < 20; i++) {
    runs.push((await sql`select run_id from pgflow.start_flow('stall_race', '{}')`)[0].run_id);
  }
  const worker = await registerWorker(sql, "stall_race_q");
  await readAndStart(sql, "stall_race_q", worker, [["stall_race", "a"]], 20);
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour' where flow_slug = 'stall_race'`;
  const a = connect();
  const b = connect();
  await Promise.all([
    a`select pgflow.requeue_stalled_tasks()`,
    (async () => {
      for (const runId of runs) await b`select pgflow.complete_task(${runId}, 'a', 0, '"late"', 1)`;
    })(),
  ]);
  const rows =
    await sql`select r.status as run, t.status as task, t.attempts_count from pgflow.runs r
                         join pgflow.step_tasks t using (run_id) where r.flow_slug = 'stall_race'`;
  for (const r of rows) {
    const completed = r.run === "completed" && r.task === "completed";
    const requeued = r.run === "started" && r.task === "queued";
    assert.ok(completed || requeued, `one outcome, got run ${r.run} / task ${r.task}`);
    assert.equal(r.attempts_count, 1);
  }
  const live = await queueMessages(sql, "stall_race_q");
  assert.equal(
    live.length,
    rows.filter((r) => r.task === "queued").length,
    "a message for every requeued task only",
  );
});

db.test("set_vt_batch changes each message's visibility and checks its arguments", async ({ sql }) => {
  await sql`select pgmq.create('vt_batch_q')`;
  const ids =
    (await sql`select * from pgmq.send_batch('vt_batch_q', array['1', '2', '3']::jsonb[])`).map((
      r,
    ) => r.send_batch);
  const rows =
    await sql`select * from pgflow.set_vt_batch('vt_batch_q', ${ids}::bigint[], '{10, 20, 30}')`;
  assert.equal(rows.length, 3);
  const msgs = await queueMessages(sql, "vt_batch_q");
  assert.deepEqual(msgs.map((m) => Math.round(m.vt_in_seconds / 10)), [1, 2, 3]);
  const missing = await sql`select * from pgflow.set_vt_batch('vt_batch_q', '{999}', '{5}')`;
  assert.equal(missing.length, 0);
  await assert.rejects(
    () => sql`select * from pgflow.set_vt_batch('vt_batch_q', '{1,2}', '{5}')`,
    /2 message ids but 1 offsets/,
  );
});

db.test("workers register, heartbeat, learn of deprecation and stop", async ({ sql }) => {
  const w1 = await registerWorker(sql, "reg_q", "fn_a");
  const w2 = await registerWorker(sql, "reg_q", "fn_a");
  const w3 = await registerWorker(sql, "reg_q", "fn_b");
  assert.equal((await sql`select pgflow.heartbeat(${w1}) as d`)[0].d, false);
  await sql`select pgflow.mark_worker_stopped(${w2})`;
  assert.equal(
    (await sql`select pgflow.deprecate_workers('fn_a') as n`)[0].n,
    1,
    "stopped workers are not counted",
  );
  assert.equal((await sql`select pgflow.heartbeat(${w1}) as d`)[0].d, true);
  assert.equal((await sql`select pgflow.heartbeat(${w3}) as d`)[0].d, false);
  await assert.rejects(
    () => sql`select pgflow.heartbeat(gen_random_uuid())`,
    { code: "PFW01", message: /worker .* is not registered/ },
  );
  await assert.rejects(
    () => sql`select pgflow.register_worker(${w1}, 'reg_q', 'fn_a')`,
    /duplicate key/,
  );
  const fns = await sql`select function_name, enabled from pgflow.worker_functions
                     where function_name like 'fn\\_%' order by function_name`;
  assert.deepEqual(fns.map((f) => [f.function_name, f.enabled]), [["fn_a", true], ["fn_b", true]]);
});
