/**
 * Flow control's waiting tasks (docs/flow-control.md): a step with a concurrency limit creates its
 * tasks waiting, without a message, and releases them when capacity frees, by priority then age;
 * cancel, failure, resume, retry, deletion, coverage and stalled recovery treat them as waiting
 * work, never as lost or stalled.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

type Sql = postgres.Sql;
const db = testDatabase(import.meta.url);

/** A one-step routed flow on `queue` whose step `s` has the given concurrency limit. */
async function limitedFlow(
  sql: Sql,
  slug: string,
  queue: string,
  limit: number,
  options: { key?: string; from?: "run" | "input"; scope?: string; priority?: number } = {},
): Promise<void> {
  await defineFlow(sql, slug, [{ slug: "s", queue }], { mode: "routed" });
  await sql`select pgflow.set_step_flow_control(${slug}, 's', priority => ${options.priority ?? 0},
    concurrency => ${limit}, concurrency_key => ${options.key ?? null}::text,
    concurrency_key_from => ${options.from ?? "run"}, concurrency_scope => ${
    options.scope ?? null
  }::text)`;
}

async function start(sql: Sql, flow: string, input: unknown, priority = 0): Promise<string> {
  const [run] = await sql`select run_id from pgflow.start_flow(${flow}, ${
    sql.json(input as never)
  }, priority => ${priority})`;
  return run.run_id;
}

async function statuses(sql: Sql, flow: string): Promise<Record<string, number>> {
  const rows = await sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from pgflow.step_tasks where flow_slug = ${flow} group by status`;
  return Object.fromEntries(rows.map((r) => [r.status, r.n]));
}

async function completeAll(sql: Sql, queue: string, worker: string, pairs: [string, string][]) {
  const claimed = (await readAndStart(sql, queue, worker, pairs, 100)).filter((r) =>
    r.disposition === "claimed"
  );
  for (const c of claimed) {
    await sql`select pgflow.complete_task(${c.run_id}, ${c.step_slug}, ${c.task_index}, '1', ${c.attempt})`;
  }
  return claimed;
}

db.test("a key holds at most its limit in flight; the rest wait without a message and are released as tasks end", async ({ sql }) => {
  await limitedFlow(sql, "cc", "cc_q", 2, { key: "$.customer" });
  const acme = [];
  for (let i = 0; i < 5; i++) acme.push(await start(sql, "cc", { customer: "acme" }));
  const other = await start(sql, "cc", { customer: "globex" });
  assert.deepEqual(await statuses(sql, "cc"), { queued: 3, waiting: 3 });
  assert.equal((await queueMessages(sql, "cc_q")).length, 3, "only released tasks have messages");
  const [{ n }] = await sql`select count(*)::int as n from pgflow.step_tasks
                            where status = 'waiting' and message_id is not null`;
  assert.equal(n, 0);
  const waiting = await sql`select * from pgflow.waiting_tasks('cc_q')`;
  assert.equal(waiting.length, 1);
  assert.equal(waiting[0].limit_scope, "cc/s");
  assert.equal(waiting[0].limit_key, "acme");
  assert.equal(Number(waiting[0].waiting), 3);
  assert.equal(waiting[0].reason, "concurrency cc/s key acme: 2 of 2 in flight");

  const worker = await registerWorker(sql, "cc_q");
  const first = await completeAll(sql, "cc_q", worker, [["cc", "s"]]);
  assert.equal(first.length, 3);
  assert.ok(first.some((c) => c.run_id === other));
  // Two acme tasks completed: two more were released, in start order.
  const released = await sql`select run_id from pgflow.step_tasks
                             where flow_slug = 'cc' and status = 'queued' order by run_id`;
  assert.deepEqual(released.map((r) => r.run_id).sort(), [acme[2], acme[3]].sort());
  await completeAll(sql, "cc_q", worker, [["cc", "s"]]);
  await completeAll(sql, "cc_q", worker, [["cc", "s"]]);
  assert.deepEqual(await statuses(sql, "cc"), { completed: 6 });
  assert.equal((await sql`select * from pgflow.waiting_tasks()`).length, 0);
});

db.test("a higher-priority run's tasks are released before older lower-priority ones", async ({ sql }) => {
  await limitedFlow(sql, "prio", "prio_q", 1);
  const first = await start(sql, "prio", {});
  const low1 = await start(sql, "prio", {});
  const low2 = await start(sql, "prio", {});
  const high = await start(sql, "prio", {}, 10);
  const worker = await registerWorker(sql, "prio_q");
  const order: string[] = [];
  for (let i = 0; i < 4; i++) {
    const [c] = await completeAll(sql, "prio_q", worker, [["prio", "s"]]);
    order.push(c.run_id!);
  }
  assert.deepEqual(order, [first, high, low1, low2]);
});

db.test("the key can come from the step's input, and a scope is shared across flows", async ({ sql }) => {
  await defineFlow(sql, "fan", [{ slug: "s", queue: "shared_q", type: "map" }], { mode: "routed" });
  await sql`select pgflow.set_step_flow_control('fan', 's', concurrency => 1,
    concurrency_key => '$.channel', concurrency_key_from => 'input', concurrency_scope => 'slack-api')`;
  await limitedFlow(sql, "other", "shared_q", 1, { key: "$.channel", scope: "slack-api" });
  await start(sql, "fan", [{ channel: "a" }, { channel: "a" }, { channel: "b" }]);
  await start(sql, "other", { channel: "b" });
  const rows = await sql`select flow_slug, task_index, status, limit_key from pgflow.step_tasks
                         where flow_slug in ('fan', 'other') order by flow_slug, task_index`;
  assert.deepEqual(rows.map((r) => [r.flow_slug, r.task_index, r.status, r.limit_key]), [
    ["fan", 0, "queued", "a"],
    ["fan", 1, "waiting", "a"],
    ["fan", 2, "queued", "b"],
    ["other", 0, "waiting", "b"],
  ]);
  // A limited map task keeps its element: the claim hands each task the element at its index.
  const inputs = await sql`select task_index, input from pgflow.step_tasks
                           where flow_slug = 'fan' order by task_index`;
  assert.deepEqual(inputs.map((r) => r.input), [{ channel: "a" }, { channel: "a" }, {
    channel: "b",
  }]);
});

db.test("cancelling a run cancels its waiting tasks without archiving, and frees what it held", async ({ sql }) => {
  await limitedFlow(sql, "cx", "cx_q", 1);
  const holder = await start(sql, "cx", {});
  const waiter = await start(sql, "cx", {});
  const next = await start(sql, "cx", {});
  const [cancelled] = await sql`select * from pgflow.cancel_run(${waiter})`;
  assert.equal(cancelled.cancelled, true);
  const [w] = await sql`select status, message_id from pgflow.step_tasks where run_id = ${waiter}`;
  assert.deepEqual([w.status, w.message_id], ["cancelled", null]);
  assert.equal((await archivedMessages(sql, "cx_q")).length, 0, "nothing to archive for it");
  await sql`select pgflow.cancel_run(${holder})`;
  assert.equal((await archivedMessages(sql, "cx_q")).length, 1);
  const [n] = await sql`select status, message_id from pgflow.step_tasks where run_id = ${next}`;
  assert.equal(n.status, "queued", "the capacity the cancelled holder freed went to the next run");
  assert.notEqual(n.message_id, null);
});

db.test("a failed run cancels its waiting tasks; retry and resume create tasks that wait again", async ({ sql }) => {
  await defineFlow(sql, "rf", [{ slug: "a", queue: "rf_q", type: "map", maxAttempts: 1 }], {
    mode: "routed",
  });
  await sql`select pgflow.set_step_flow_control('rf', 'a', concurrency => 1)`;
  const run = await start(sql, "rf", [1, 2, 3]);
  assert.deepEqual(await statuses(sql, "rf"), { queued: 1, waiting: 2 });
  const worker = await registerWorker(sql, "rf_q");
  const [c] = (await readAndStart(sql, "rf_q", worker, [["rf", "a"]])).filter((r) =>
    r.disposition === "claimed"
  );
  await sql`select pgflow.fail_task(${run}, 'a', ${c.task_index}, 'boom', ${c.attempt})`;
  assert.deepEqual(await statuses(sql, "rf"), { failed: 1, cancelled: 2 });
  for (const verb of ["retry_run", "resume_run"]) {
    const [again] = await sql.unsafe(`select run_id from pgflow.${verb}($1)`, [run]);
    const rows = await sql`select status, count(*)::int as n from pgflow.step_tasks
                           where run_id = ${again.run_id} group by status order by status`;
    assert.deepEqual(rows.map((r) => [r.status, r.n]), [["queued", 1], ["waiting", 2]], verb);
    await sql`select pgflow.cancel_run(${again.run_id})`;
  }
});

db.test("deleting a flow frees the capacity its tasks held in a shared scope", async ({ sql }) => {
  await limitedFlow(sql, "gone", "del_q", 1, { scope: "api" });
  await limitedFlow(sql, "stays", "del_q", 1, { scope: "api" });
  await start(sql, "gone", {});
  await start(sql, "gone", {});
  const stays = await start(sql, "stays", {});
  assert.equal(
    (await sql`select status from pgflow.step_tasks where run_id = ${stays}`)[0].status,
    "waiting",
  );
  await sql`select pgflow.delete_flow_and_data('gone')`;
  const [t] = await sql`select status, message_id from pgflow.step_tasks where run_id = ${stays}`;
  assert.equal(t.status, "queued");
  assert.equal(
    (await queueMessages(sql, "del_q")).map((m) => m.msg_id).includes(t.message_id),
    true,
  );
});

db.test("coverage counts waiting tasks as work; stalled recovery leaves them alone; tick releases what a hand change freed", async ({ sql }) => {
  await limitedFlow(sql, "cov", "cov_q", 1);
  await start(sql, "cov", {});
  const waiter = await start(sql, "cov", {});
  const [cov] = await sql`select * from pgflow.queue_coverage('cov_q')`;
  assert.equal(Number(cov.queued_tasks), 2);
  assert.equal(cov.status, "MISSING", "work is waiting and nobody serves it");
  await sql`update pgflow.step_tasks set queued_at = now() - interval '1 day' where run_id = ${waiter}`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 0);
  // A held task changed outside pgflow's functions (session_replication_role skips triggers):
  // nothing released it, so the periodic release does.
  await sql.begin(async (tx) => {
    await tx`set local session_replication_role = replica`;
    await tx`update pgflow.step_tasks set status = 'completed' where flow_slug = 'cov' and status = 'queued'`;
  });
  assert.equal((await sql`select pgflow.tick() as n`)[0].n, 1);
  assert.equal(
    (await sql`select status from pgflow.step_tasks where run_id = ${waiter}`)[0].status,
    "queued",
  );
});

db.test("raising a limit releases at once; bad values fail at the SQL boundary naming the option and the fix", async ({ sql }) => {
  await limitedFlow(sql, "up", "up_q", 1);
  for (let i = 0; i < 4; i++) await start(sql, "up", {});
  assert.equal((await sql`select pgflow.set_concurrency_limit('up/s', 3) as n`)[0].n, 2);
  assert.deepEqual(await statuses(sql, "up"), { queued: 3, waiting: 1 });
  const bad: [string, RegExp][] = [
    [
      `select pgflow.set_step_flow_control('up', 's', concurrency => 0)`,
      /concurrency\.limit must be an integer between 1 and 100000.*got 0/,
    ],
    [
      `select pgflow.set_step_flow_control('up', 's', concurrency => 2, concurrency_key => '$.a[')`,
      /concurrency\.key "\$\.a\[" is not a JSON path/,
    ],
    [
      `select pgflow.set_step_flow_control('up', 's', concurrency => 2, concurrency_key => '$.a', concurrency_key_from => 'body')`,
      /keyFrom must be "run".*got "body"/,
    ],
    [
      `select pgflow.set_step_flow_control('up', 's', concurrency => 2, concurrency_scope => 'a/b')`,
      /concurrency\.scope must be/,
    ],
    [
      `select pgflow.set_step_flow_control('up', 's', priority => 5000)`,
      /priority must be an integer between -1000 and 1000/,
    ],
    [
      `select pgflow.set_step_flow_control('up', 's', concurrency_key => '$.a')`,
      /need a concurrency limit/,
    ],
    [
      `select pgflow.start_flow('up', '{}', priority => 1001)`,
      /flow up: priority must be an integer between -1000 and 1000, got 1001/,
    ],
    [
      `select pgflow.set_concurrency_limit('up/s', 0)`,
      /max_running must be an integer between 1 and 100000, got 0/,
    ],
  ];
  for (const [query, message] of bad) {
    await assert.rejects(sql.unsafe(query), message, query);
  }
});
