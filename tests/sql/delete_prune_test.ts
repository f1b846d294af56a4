/** delete_flow_and_data and pruning reach only the flow's own data, through task snapshots. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow } from "../../src/dsl/flow.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { withStepQueues } from "../../src/routing/with_step_queues.ts";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  compileFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const shared = (slug: string) =>
  routeFlow(new Flow<{ n: number }>({ slug }).step({ slug: "a" }, (i) => i.n), {
    queues: { a: "del_shared" },
  });

async function runToCompletion(sql: Sql, flow: string, queue: string) {
  const [run] = await sql`select * from pgflow.start_flow(${flow}, '{"n": 1}')`;
  const worker = await registerWorker(sql, queue);
  for (const r of await readAndStart(sql, queue, worker, [[flow, "a"]])) {
    if (r.run_id === run.run_id) {
      await sql`select pgflow.complete_task(${r.run_id}, 'a', 0, '1', ${r.attempt})`;
    }
  }
  return run.run_id as string;
}

const ids = async (sql: Sql, flow: string) =>
  (await sql`select message_id::text as id from pgflow.step_tasks where flow_slug = ${flow}`).map((
    r,
  ) => r.id);

db.test("deleting a routed flow removes only its tracked messages from a shared queue", async ({ sql }) => {
  await compileFlow(sql, shared("del_mine"));
  await compileFlow(sql, shared("del_theirs"));
  await runToCompletion(sql, "del_mine", "del_shared"); // archived message
  await sql`select pgflow.start_flow('del_mine', '{"n": 2}')`; // live message
  await runToCompletion(sql, "del_theirs", "del_shared");
  await sql`select pgflow.start_flow('del_theirs', '{"n": 3}')`;
  const [{ send: foreign }] = await sql`select * from pgmq.send('del_shared', '{"x": 1}'::jsonb)`;
  await sql`select pgmq.archive('del_shared', ${foreign}::bigint)`;
  const [{ send: foreignLive }] =
    await sql`select * from pgmq.send('del_shared', '{"x": 2}'::jsonb)`;
  const mine = await ids(sql, "del_mine");
  const theirs = await ids(sql, "del_theirs");

  await sql`select pgflow.delete_flow_and_data('del_mine')`;
  const live = (await queueMessages(sql, "del_shared")).map((m) => m.msg_id);
  const archived = (await archivedMessages(sql, "del_shared")).map((m) => m.msg_id);
  for (const id of mine) {
    assert.ok(!live.includes(id) && !archived.includes(id), `message ${id} of del_mine is gone`);
  }
  assert.deepEqual([...live, ...archived].sort(), [...theirs, foreign, foreignLive].sort());
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'del_mine'`)[0].n,
    0,
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.runs where flow_slug = 'del_theirs'`)[0].n,
    2,
  );
  const queues = (await sql`select queue_name from pgmq.list_queues()`).map((q) => q.queue_name);
  assert.ok(queues.includes("del_shared"), "the shared queue stays");
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.shared_queues where queue_name = 'del_shared'`)[
      0
    ].n,
    1,
  );
});

db.test("deleting plain and step-queued flows drops their own queues", async ({ sql }) => {
  await compileFlow(
    sql,
    new Flow<{ n: number }>({ slug: "Del_Plain" }).step({ slug: "a" }, (i) => i.n),
  );
  await compileFlow(
    sql,
    withStepQueues(
      new Flow<{ n: number }>({ slug: "del_steps" }).step({ slug: "a" }, (i) => i.n).step({
        slug: "b",
      }, (i) => i.n),
    ),
  );
  await sql`select pgflow.start_flow('Del_Plain', '{"n": 1}')`;
  await sql`select pgflow.start_flow('del_steps', '{"n": 1}')`;
  await sql`select pgflow.delete_flow_and_data('Del_Plain')`;
  await sql`select pgflow.delete_flow_and_data('del_steps')`;
  const queues = (await sql`select queue_name from pgmq.list_queues()`).map((q) => q.queue_name);
  for (const q of ["del_plain", "del_steps__a", "del_steps__b"]) {
    assert.ok(!queues.includes(q), `${q} dropped`);
  }
  await assert.rejects(
    () => sql`select pgflow.delete_flow_and_data('del_steps')`,
    /flow 'del_steps' does not exist/,
  );
});

db.test("pruning removes old terminal runs with their own messages only", async ({ sql }) => {
  await compileFlow(sql, shared("prune_old"));
  await compileFlow(sql, shared("prune_new"));
  const oldRun = await runToCompletion(sql, "prune_old", "del_shared");
  const recentRun = await runToCompletion(sql, "prune_new", "del_shared");
  const [open] = await sql`select * from pgflow.start_flow('prune_old', '{"n": 9}')`;
  const [{ send: foreign }] = await sql`select * from pgmq.send('del_shared', '{"x": 1}'::jsonb)`;
  await sql`select pgmq.archive('del_shared', ${foreign}::bigint)`;
  await sql`update pgflow.runs set completed_at = now() - interval '40 days' where run_id = ${oldRun}`;
  const oldIds =
    (await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${oldRun}`).map((
      r,
    ) => r.id);
  await sql`update pgmq.a_del_shared set archived_at = now() - interval '40 days' where msg_id = ${foreign}`;

  assert.equal((await sql`select pgflow.prune_data_older_than(interval '30 days') as n`)[0].n, 1);
  const runs = (await sql`select run_id from pgflow.runs where flow_slug like 'prune_%'`).map((r) =>
    r.run_id
  ).sort();
  assert.deepEqual(runs, [recentRun, open.run_id].sort());
  const archived = (await archivedMessages(sql, "del_shared")).map((m) => m.msg_id);
  for (const id of oldIds) assert.ok(!archived.includes(id), "the old run's archive row is gone");
  assert.ok(
    archived.includes(foreign),
    "an unknown message in the shared archive is not pruned by flow retention",
  );
  await assert.rejects(
    () => sql`select pgflow.prune_data_older_than(null)`,
    /retention must be a non-negative interval/,
  );

  // The queue-wide maintenance prunes the shared archive by age, whoever sent the messages.
  assert.equal(
    (await sql`select pgflow.prune_shared_queue_archive('del_shared', interval '30 days') as n`)[0]
      .n,
    "1",
  );
  assert.ok(!(await archivedMessages(sql, "del_shared")).some((m) => m.msg_id === foreign));
  await sql`select pgmq.create('not_shared')`;
  await assert.rejects(
    () => sql`select pgflow.prune_shared_queue_archive('not_shared', interval '1 day')`,
    /queue 'not_shared' is not a declared shared queue/,
  );
});

db.test("pruning in batches deletes the oldest ended runs first, at most max_runs a call", async ({ sql }) => {
  await compileFlow(sql, shared("prune_batch"));
  const ended: string[] = [];
  for (let i = 0; i < 5; i++) ended.push(await runToCompletion(sql, "prune_batch", "del_shared"));
  // Run i started 500 - i days ago: older than any other test's runs, so only these qualify.
  for (const [i, id] of ended.entries()) {
    await sql`update pgflow.runs
              set started_at = now() - make_interval(days => 500 - ${i}::int),
                  completed_at = now() - make_interval(days => 500 - ${i}::int) + interval '1 s'
              where run_id = ${id}`;
  }
  // Older still, but not ended: never pruned.
  const [open] = await sql`select * from pgflow.start_flow('prune_batch', '{"n": 9}')`;
  await sql`update pgflow.runs set started_at = now() - interval '900 days'
            where run_id = ${open.run_id}`;
  const messages = (await sql`select message_id::text as id from pgflow.step_tasks
                               where run_id = any (${ended}::uuid[])`).map((r) => r.id);
  const left = async () =>
    (await sql`select run_id from pgflow.runs where flow_slug = 'prune_batch'
               order by started_at`).map((r) => r.run_id);
  const prune = async () =>
    (await sql`select pgflow.prune_data_older_than(interval '365 days', 2) as n`)[0].n;

  assert.equal(await prune(), 2);
  assert.deepEqual(await left(), [open.run_id, ...ended.slice(2)], "the two oldest went first");
  assert.equal(await prune(), 2);
  assert.equal(await prune(), 1);
  assert.equal(await prune(), 0);
  assert.deepEqual(await left(), [open.run_id]);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.step_tasks
               where run_id = any (${ended}::uuid[])`)[0].n,
    0,
  );
  const archived = (await archivedMessages(sql, "del_shared")).map((m) => m.msg_id);
  for (const id of messages) assert.ok(!archived.includes(id), `archive row ${id} pruned`);
  await assert.rejects(
    () => sql`select pgflow.prune_data_older_than(interval '1 day', 0)`,
    /max_runs must be at least 1 or NULL \(all\), got 0/,
  );
});
