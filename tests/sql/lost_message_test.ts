/**
 * A retry or stalled recovery whose message is gone (purged or deleted outside pgflow) ends the
 * task's attempts visibly instead of queueing it with nothing to claim (issue 14, item 9a).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function claimOne(sql: Sql, flow: string, queue: string) {
  const [run] = await sql`select * from pgflow.start_flow(${flow}, '{}')`;
  const worker = await registerWorker(sql, queue);
  const [row] = await readAndStart(sql, queue, worker, [[flow, "a"]]);
  assert.equal(row.disposition, "claimed");
  return { runId: run.run_id as string, attempt: row.attempt! };
}

async function outcome(sql: Sql, runId: string) {
  const [r] = await sql`
    select r.status as run, r.error_message as run_error, t.status as task, t.error_message as task_error
    from pgflow.runs r join pgflow.step_tasks t using (run_id) where r.run_id = ${runId}`;
  return r;
}

db.test("a failed attempt whose message was purged fails the run, saying why", async ({ sql }) => {
  await defineFlow(sql, "lost_retry", [{ slug: "a", queue: "lost_retry_q", maxAttempts: 3 }], {
    mode: "routed",
  });
  const { runId, attempt } = await claimOne(sql, "lost_retry", "lost_retry_q");
  await sql`select pgmq.purge_queue('lost_retry_q')`;
  await sql`select pgflow.fail_task(${runId}, 'a', 0, 'boom', ${attempt})`;
  const r = await outcome(sql, runId);
  assert.deepEqual([r.run, r.task], ["failed", "failed"], "not queued with nothing to claim");
  assert.match(
    r.task_error,
    /^boom; not retried: its message \d+ is gone from queue lost_retry_q \(purged or deleted outside pgflow\)$/,
  );
  assert.equal(r.run_error, r.task_error);
});

db.test("stalled recovery of a task whose message was deleted fails it, and recovers the others", async ({ sql }) => {
  await defineFlow(sql, "lost_stall", [{ slug: "a", queue: "lost_stall_q", maxAttempts: 3 }], {
    mode: "routed",
  });
  const lost = await claimOne(sql, "lost_stall", "lost_stall_q");
  const kept = await claimOne(sql, "lost_stall", "lost_stall_q");
  const [{ id }] =
    await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${lost.runId}`;
  await sql`select pgmq.delete('lost_stall_q', ${id}::bigint)`;
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour' where flow_slug = 'lost_stall'`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 2);

  const gone = await outcome(sql, lost.runId);
  assert.deepEqual([gone.run, gone.task], ["failed", "failed"]);
  assert.match(
    gone.task_error,
    /^stalled: .*; not retried: its message \d+ is gone from queue lost_stall_q/,
  );
  const requeued = await outcome(sql, kept.runId);
  assert.deepEqual([requeued.run, requeued.task], ["started", "queued"]);
  assert.equal((await queueMessages(sql, "lost_stall_q")).length, 1, "its message is visible");
});

db.test("whenExhausted still decides: a skipping step is skipped and the run goes on", async ({ sql }) => {
  await sql`select pgflow.create_flow('lost_skip', 3, 1, 60, 'routed')`;
  await sql`select pgflow.add_step('lost_skip', 'a', queue_name => 'lost_skip_q', when_exhausted => 'skip')`;
  await sql`select pgflow.add_step('lost_skip', 'b', '{a}', queue_name => 'lost_skip_q')`;
  const { runId, attempt } = await claimOne(sql, "lost_skip", "lost_skip_q");
  await sql`select pgmq.purge_queue('lost_skip_q')`;
  await sql`select pgflow.fail_task(${runId}, 'a', 0, 'boom', ${attempt})`;
  const states = await sql`select step_slug, status, error_message from pgflow.step_states
                           where run_id = ${runId} order by step_slug`;
  assert.deepEqual(states.map((s) => `${s.step_slug}:${s.status}`), ["a:skipped", "b:started"]);
  assert.match(states[0].error_message, /not retried: its message \d+ is gone/);
});
