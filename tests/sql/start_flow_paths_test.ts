/**
 * start_flow starts a flow whose root steps are all single tasks without conditions directly
 * (its fast path), and every other flow through pgflow._start_ready_steps. Both must leave the same
 * rows: the same step states, the same tasks on the same queues, the same messages, one
 * notification per queue for a waiter.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { allNotified, defineFlow, queueMessages, waitForNotifications } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function runRows(sql: Parameters<typeof queueMessages>[0], runId: string) {
  const states = await sql`
    select step_slug, status, remaining_deps, initial_tasks, remaining_tasks,
           started_at is not null as started
    from pgflow.step_states where run_id = ${runId} order by step_slug`;
  const tasks = await sql`
    select step_slug, task_index, status, queue_name, message_id is not null as sent
    from pgflow.step_tasks where run_id = ${runId} order by step_slug, task_index`;
  return { states: states.map((r) => ({ ...r })), tasks: tasks.map((r) => ({ ...r })) };
}

db.test("plain roots start directly with exactly the rows the general path makes", async ({ sql, connect }) => {
  // Two roots on two queues and a dependent. "slow" is the same flow with a condition on a root
  // that every input meets ({} is contained in any object): the general path, same outcome.
  const shape = [
    { slug: "a", queue: "sfp_q1" },
    { slug: "b", queue: "sfp_q2" },
    { slug: "c", deps: ["a", "b"], queue: "sfp_q1" },
  ];
  await defineFlow(sql, "sfp_fast", shape, { mode: "routed" });
  await defineFlow(sql, "sfp_slow", shape, { mode: "routed" });
  await sql`update pgflow.steps set required_input_pattern = '{}'::jsonb
            where flow_slug = 'sfp_slow' and step_slug = 'a'`;

  const listener = connect();
  const heard: string[] = [];
  for (const q of ["sfp_q1", "sfp_q2"]) {
    await listener.listen(`pgflow_queue:${q}`, () => heard.push(q));
  }
  await waitForNotifications(listener, ["pgflow_queue:sfp_q1", "pgflow_queue:sfp_q2"]);

  const [fast] = await sql`select * from pgflow.start_flow('sfp_fast', '{"x":1}')`;
  const [slow] = await sql`select * from pgflow.start_flow('sfp_slow', '{"x":1}')`;
  assert.deepEqual(await runRows(sql, fast.run_id), await runRows(sql, slow.run_id));
  const fastRows = await runRows(sql, fast.run_id);
  assert.deepEqual(fastRows.states.map((s) => [s.step_slug, s.status, s.remaining_tasks]), [
    ["a", "started", 1],
    ["b", "started", 1],
    ["c", "created", null],
  ]);
  assert.deepEqual(fastRows.tasks.map((t) => [t.step_slug, t.queue_name, t.sent]), [
    ["a", "sfp_q1", true],
    ["b", "sfp_q2", true],
  ]);
  const bodies = (await queueMessages(sql, "sfp_q1")).map((m) => m.message);
  assert.deepEqual(bodies, [
    { flow_slug: "sfp_fast", run_id: fast.run_id, step_slug: "a", task_index: 0 },
    { flow_slug: "sfp_slow", run_id: slow.run_id, step_slug: "a", task_index: 0 },
  ]);
  await allNotified(listener, sql);
  assert.deepEqual(heard.sort(), ["sfp_q1", "sfp_q1", "sfp_q2", "sfp_q2"]);
  assert.equal(fast.status, "started");
});

db.test("a root map, a conditional root and a flow without steps still take the general path", async ({ sql }) => {
  await defineFlow(sql, "sfp_map", [{ slug: "m", type: "map" }]);
  const [map] = await sql`select * from pgflow.start_flow('sfp_map', '[1, 2, 3]')`;
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.step_tasks where run_id = ${map.run_id}`;
  assert.equal(n, 3);

  await defineFlow(sql, "sfp_cond", [{ slug: "a" }, { slug: "b" }]);
  await sql`update pgflow.steps set required_input_pattern = '{"go": true}'::jsonb, when_unmet = 'skip'
            where flow_slug = 'sfp_cond' and step_slug = 'a'`;
  const [cond] = await sql`select * from pgflow.start_flow('sfp_cond', '{"go": false}')`;
  const states = await sql`select step_slug, status from pgflow.step_states
                           where run_id = ${cond.run_id} order by step_slug`;
  assert.deepEqual(states.map((s) => [s.step_slug, s.status]), [["a", "skipped"], [
    "b",
    "started",
  ]]);

  await defineFlow(sql, "sfp_empty", []);
  const [empty] = await sql`select * from pgflow.start_flow('sfp_empty', '{}')`;
  assert.equal(empty.status, "completed");
});
