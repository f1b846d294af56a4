/**
 * The SQL side of the client: pgflow.get_run's document, and the wake-up hints the triggers send
 * (pg_notify on pgflow_run:<run id>, once per run per transaction, the run id as payload; and
 * realtime.send where it exists, checked at call time).
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  allNotified,
  defineFlow,
  readAndStart,
  registerWorker,
  waitForNotifications,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

/**
 * Collects notifications on the channels of `runIds` (a dedicated listening connection);
 * `delivered()` returns once every one committed before it has been heard.
 */
async function listenTo(connect: () => postgres.Sql, sql: postgres.Sql, runIds: string[]) {
  const heard: { channel: string; payload: string }[] = [];
  const conn = connect();
  for (const id of runIds) {
    await conn.listen(
      `pgflow_run:${id}`,
      (payload) => heard.push({ channel: `pgflow_run:${id}`, payload }),
    );
  }
  await waitForNotifications(conn, runIds.map((id) => `pgflow_run:${id}`));
  return { heard, delivered: () => allNotified(conn, sql) };
}

db.test("get_run returns the run with every step in definition order, null for an unknown run", async ({ sql }) => {
  await defineFlow(sql, "gr_flow", [
    { slug: "a", queue: "gr_q" },
    { slug: "b", deps: ["a"], queue: "gr_q", type: "map" },
  ], { mode: "routed" });
  const runId = crypto.randomUUID();
  await sql`select pgflow.start_flow('gr_flow', '{"n": 1}', ${runId}::uuid)`;
  const [{ run }] = await sql`select pgflow.get_run(${runId}::uuid) as run`;
  assert.equal(run.run_id, runId);
  assert.equal(run.flow_slug, "gr_flow");
  assert.equal(run.status, "started");
  assert.deepEqual(run.input, { n: 1 });
  assert.equal(run.output, null);
  assert.equal(run.remaining_steps, 2);
  assert.match(run.started_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
  assert.deepEqual(
    run.steps.map((
      s: Record<string, unknown>,
    ) => [s.step_slug, s.step_index, s.step_type, s.status]),
    [["a", 0, "single", "started"], ["b", 1, "map", "created"]],
  );
  assert.deepEqual(Object.keys(run.steps[0]).sort(), [
    "attempts",
    "cancelled_at",
    "completed_at",
    "error_message",
    "failed_at",
    "initial_tasks",
    "kind",
    "output",
    "remaining_tasks",
    "reused",
    "skip_reason",
    "skipped_at",
    "started_at",
    "status",
    "step_index",
    "step_slug",
    "step_type",
    "wait_key",
    "wait_until",
    "waiting",
    "waiting_for",
  ]);
  const [{ missing }] = await sql`select pgflow.get_run(gen_random_uuid()) as missing`;
  assert.equal(missing, null);
});

db.test("a status change sends one small notification per run per transaction, on the run's channel", async ({ sql, connect }) => {
  await defineFlow(sql, "ev_flow", [
    { slug: "a", queue: "ev_q" },
    { slug: "b", deps: ["a"], queue: "ev_q" },
  ], { mode: "routed" });
  const one = crypto.randomUUID();
  const two = crypto.randomUUID();
  const { heard, delivered } = await listenTo(connect, sql, [one, two]);
  // Two runs started in one transaction: one notification each.
  await sql.begin(async (tx) => {
    await tx`select pgflow.start_flow('ev_flow', '{"secret": "input"}', ${one}::uuid)`;
    await tx`select pgflow.start_flow('ev_flow', '{"secret": "input"}', ${two}::uuid)`;
  });
  await delivered();
  assert.deepEqual(
    heard.sort((x, y) => x.channel.localeCompare(y.channel)),
    [
      { channel: `pgflow_run:${one}`, payload: one },
      { channel: `pgflow_run:${two}`, payload: two },
    ].sort((x, y) => x.channel.localeCompare(y.channel)),
  );
  heard.length = 0;

  // complete_task: a completes, b starts (several status changes) in one transaction: one hint.
  const worker = await registerWorker(sql, "ev_q");
  const claimed = await readAndStart(sql, "ev_q", worker, [["ev_flow", "a"]], 10);
  const first = claimed.find((r) => r.run_id === one)!;
  await sql`select pgflow.complete_task(${one}::uuid, 'a', 0, '{"secret": "output"}', ${first.attempt})`;
  await delivered();
  assert.deepEqual(heard, [{ channel: `pgflow_run:${one}`, payload: one }]);
  // Nothing but the run id is ever sent: no input, output or error.
  assert.ok(heard.every((h) => !h.payload.includes("secret")));
  heard.length = 0;

  // A change that is not a status change (a retry's error, a counter) sends nothing.
  await sql`update pgflow.step_states set remaining_deps = remaining_deps where run_id = ${two}::uuid`;
  await sql`update pgflow.runs set remaining_steps = remaining_steps where run_id = ${two}::uuid`;
  await delivered();
  assert.deepEqual(heard, []);
});

db.test("complete_tasks finishing many runs in one call sends one hint per run", async ({ sql, connect }) => {
  await defineFlow(sql, "batch_flow", [{ slug: "a", queue: "batch_q" }], { mode: "routed" });
  const ids = Array.from({ length: 20 }, () => crypto.randomUUID());
  for (const id of ids) await sql`select pgflow.start_flow('batch_flow', '1', ${id}::uuid)`;
  const { heard, delivered } = await listenTo(connect, sql, ids);
  const worker = await registerWorker(sql, "batch_q");
  const claimed = await readAndStart(sql, "batch_q", worker, [["batch_flow", "a"]], 50);
  assert.equal(claimed.length, 20);
  await sql`select * from pgflow.complete_tasks(
    ${claimed.map((r) => r.run_id)}::uuid[], ${claimed.map(() => "a")}::text[],
    ${claimed.map(() => 0)}::int[], ${claimed.map(() => "2")}::jsonb[],
    ${claimed.map((r) => r.attempt)}::int[])`;
  await delivered();
  assert.deepEqual(heard.map((h) => h.payload).sort(), [...ids].sort());
});

db.test("where realtime.send exists it is called once per run per transaction with a private topic", async ({ sql }) => {
  await defineFlow(sql, "rt_flow", [{ slug: "a", queue: "rt_q" }, {
    slug: "b",
    deps: ["a"],
    queue: "rt_q",
  }], {
    mode: "routed",
  });
  const before = crypto.randomUUID();
  await sql`select pgflow.start_flow('rt_flow', '{}', ${before}::uuid)`;
  // Supabase's realtime.send(payload, event, topic, private) inserts into realtime.messages; a
  // table of calls stands in for it. It is looked up when called, so adding it needs no migration.
  await sql.unsafe(`
    create schema realtime;
    create table realtime.sent (payload jsonb, event text, topic text, private boolean);
    create function realtime.send(payload jsonb, event text, topic text, private boolean default true)
    returns void language sql as $$ insert into realtime.sent values (payload, event, topic, private) $$;`);
  const runId = crypto.randomUUID();
  await sql`select pgflow.start_flow('rt_flow', '{"x": 1}', ${runId}::uuid)`;
  const worker = await registerWorker(sql, "rt_q");
  const [task] = (await readAndStart(sql, "rt_q", worker, [["rt_flow", "a"]], 10))
    .filter((r) => r.run_id === runId);
  await sql`select pgflow.complete_task(${runId}::uuid, 'a', 0, '"done"', ${task.attempt})`;
  const sent = await sql`select payload, event, topic, private from realtime.sent`;
  assert.deepEqual([...sent], [
    {
      payload: { run_id: runId },
      event: "run_changed",
      topic: `pgflow_run:${runId}`,
      private: true,
    },
    {
      payload: { run_id: runId },
      event: "run_changed",
      topic: `pgflow_run:${runId}`,
      private: true,
    },
  ], "one for the start, one for the completion transaction");
  await sql.unsafe(`drop schema realtime cascade`);
  // Gone again: runs still start and complete.
  const after = crypto.randomUUID();
  await sql`select pgflow.start_flow('rt_flow', '{}', ${after}::uuid)`;
});
