/**
 * pgflow.read_and_claim: one pgmq.read_with_poll, then start_tasks on exactly the ids it returned,
 * in one call. Every disposition of the claim table (docs/design.md, Claim table), the read-once property, and a
 * failed claim rolling its read back.
 */
import assert from "node:assert/strict";
import { WORKER_OPTIONS } from "../../src/worker/options.ts";
import type { PendingQuery, Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, makeVisible, queueMessages, startTasks } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Row {
  msg_id: string;
  read_ct: number;
  vt: Date;
  message: unknown;
  headers: unknown;
  disposition: string;
  flow_slug: string | null;
  run_id: string | null;
  step_slug: string | null;
  task_index: number | null;
  input: unknown;
  attempt: number | null;
}

/** The call, not yet sent: postgres.js sends a query when it is awaited or `.execute()`d. */
function readAndClaim(
  sql: Sql,
  queue: string,
  worker: string,
  opts: { vt?: number; qty?: number; wait?: number; supported?: unknown } = {},
): PendingQuery<Row[]> {
  const supported = opts.supported === undefined ? null : JSON.stringify(opts.supported);
  return sql<Row[]>`
    select msg_id::text as msg_id, read_ct, vt, message, headers, disposition, flow_slug,
           run_id, step_slug, task_index, input, attempt
    from pgflow.read_and_claim(${queue}, ${worker}::uuid, ${opts.vt ?? 30}, ${opts.qty ?? 10},
                               ${opts.wait ?? 1}, 50, ${supported}::text::jsonb)`;
}

async function tasksById(
  sql: Sql,
  queue: string,
): Promise<Record<string, Record<string, unknown>>> {
  const rows = await sql`select message_id::text as id, status, attempts_count, started_at,
                                last_worker_id
                         from pgflow.step_tasks where queue_name = ${queue}`;
  return Object.fromEntries(rows.map(({ id, ...t }) => [id, t]));
}

db.test("every disposition in one call; only claimed rows carry a task, the rest only the read", async ({ sql }) => {
  await defineFlow(sql, "rac_mix", [{ slug: "a", queue: "rac_q", timeout: 20 }, {
    slug: "b",
    queue: "rac_q",
  }], { mode: "routed" });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'rac_q', 'test_fn', '[["rac_mix", "a"]]'::jsonb)`;
  const [r1] = await sql`select * from pgflow.start_flow('rac_mix', '{"n": 1}')`;
  const [r2] = await sql`select * from pgflow.start_flow('rac_mix', '{"n": 2}')`;
  const [r3] = await sql`select * from pgflow.start_flow('rac_mix', '{"n": 3}')`;
  const [{ send: foreign }] =
    await sql`select * from pgmq.send('rac_q', '{"flow_slug": "rac_mix", "step_slug": "a"}'::jsonb,
                                   '{"x-secret": "not for workers"}'::jsonb)`;
  const ids = await sql`select run_id, step_slug, message_id::text as id from pgflow.step_tasks`;
  const id = (run: string, step: string) =>
    ids.find((t) => t.run_id === run && t.step_slug === step)!.id;
  // r2's run failed by hand: its messages stay, its tasks are ineligible.
  await sql`update pgflow.runs set status = 'failed' where run_id = ${r2.run_id}`;
  // r3's task a was claimed already and its message has reappeared: started.
  await startTasks(sql, "rac_q", [id(r3.run_id, "a")], worker, [["rac_mix", "a"]]);
  await makeVisible(sql, "rac_q");

  const messagesBefore = await queueMessages(sql, "rac_q");
  const tasksBefore = await tasksById(sql, "rac_q");
  const rows = await readAndClaim(sql, "rac_q", worker, { vt: 7 });

  // Read once: every message is returned exactly once, in id order, with its read count; only the
  // claimed one with its body (checked below).
  assert.deepEqual(rows.map((r) => r.msg_id), messagesBefore.map((m) => m.msg_id));
  for (const [i, r] of rows.entries()) {
    assert.equal(r.read_ct, messagesBefore[i].read_ct + 1);
    assert.equal(r.headers, null);
  }
  const byId = Object.fromEntries(rows.map((r) => [r.msg_id, r]));
  assert.deepEqual(Object.fromEntries(rows.map((r) => [r.msg_id, r.disposition])), {
    [id(r1.run_id, "a")]: "claimed",
    [id(r1.run_id, "b")]: "unsupported",
    [id(r2.run_id, "a")]: "ineligible",
    [id(r2.run_id, "b")]: "unsupported",
    [id(r3.run_id, "a")]: "started",
    [id(r3.run_id, "b")]: "unsupported",
    [String(foreign)]: "unknown",
  });
  const claimed = byId[id(r1.run_id, "a")];
  assert.deepEqual(
    [claimed.flow_slug, claimed.run_id, claimed.step_slug, claimed.task_index, claimed.input],
    ["rac_mix", r1.run_id, "a", 0, { n: 1 }],
  );
  assert.equal(claimed.attempt, 1);
  assert.deepEqual(
    claimed.message,
    messagesBefore.find((m) => m.msg_id === claimed.msg_id)!.message,
  );
  // Not claimed: the owning task's identity (so the worker can name the flow and step; none for
  // the foreign message), but no input, attempt, body or headers (a foreign body never reaches a
  // worker).
  for (const r of rows.filter((r) => r.disposition !== "claimed")) {
    const owner = ids.find((t) => t.id === String(r.msg_id));
    assert.deepEqual(
      [r.flow_slug, r.run_id, r.step_slug, r.task_index, r.input, r.attempt, r.message, r.headers],
      [
        owner ? "rac_mix" : null,
        owner?.run_id ?? null,
        owner?.step_slug ?? null,
        owner ? 0 : null,
        null,
        null,
        null,
        null,
      ],
      `message ${r.msg_id} (${r.disposition})`,
    );
  }

  // Queue: each message read once; the claimed one re-armed to timeout + 2 s, the others left with
  // the read's own visibility and otherwise unchanged.
  const messagesAfter = await queueMessages(sql, "rac_q");
  for (const [i, m] of messagesAfter.entries()) {
    const before = messagesBefore[i];
    assert.equal(m.msg_id, before.msg_id);
    assert.equal(m.read_ct, before.read_ct + 1, `message ${m.msg_id} read once`);
    assert.deepEqual(m.message, before.message);
    if (m.msg_id === claimed.msg_id) {
      assert.ok(
        m.vt_in_seconds > 20 && m.vt_in_seconds <= 22.5,
        `claimed vt in ${m.vt_in_seconds}s`,
      );
    } else {
      assert.ok(m.vt_in_seconds > 5 && m.vt_in_seconds <= 7.5, `read vt in ${m.vt_in_seconds}s`);
      assert.equal(m.vt.getTime(), byId[m.msg_id].vt.getTime(), "vt as the read set it");
    }
  }
  // Tasks: only the claimed one changed.
  const tasksAfter = await tasksById(sql, "rac_q");
  for (const [mid, t] of Object.entries(tasksAfter)) {
    if (mid === claimed.msg_id) {
      assert.deepEqual([t.status, t.attempts_count, t.last_worker_id], ["started", 1, worker]);
    } else {
      assert.deepEqual(t, tasksBefore[mid], `task of message ${mid} unchanged`);
    }
  }
  // Nothing is visible now, so the next call reads (and claims) nothing.
  assert.equal((await readAndClaim(sql, "rac_q", worker, { wait: 1 })).length, 0);
});

db.test("qty bounds the read, explicit pairs replace the registered set, an empty poll returns nothing", async ({ sql }) => {
  await defineFlow(sql, "rac_qty", [{ slug: "a", queue: "rac_qty_q" }], { mode: "routed" });
  for (let i = 0; i < 5; i++) await sql`select pgflow.start_flow('rac_qty', ${sql.json({ i })})`;
  const worker = crypto.randomUUID();
  // Registered with nothing: the registered set claims nothing, the explicit pairs do.
  await sql`select pgflow.register_worker(${worker}, 'rac_qty_q', 'test_fn')`;
  const none = await readAndClaim(sql, "rac_qty_q", worker, { qty: 2 });
  assert.deepEqual(none.map((r) => r.disposition), ["unsupported", "unsupported"]);
  const rows = await readAndClaim(sql, "rac_qty_q", worker, {
    qty: 2,
    supported: [["rac_qty", "a"]],
  });
  assert.deepEqual(rows.map((r) => [r.disposition, r.input]), [["claimed", { i: 2 }], [
    "claimed",
    { i: 3 },
  ]]);
  assert.equal(
    (await readAndClaim(sql, "rac_qty_q", worker, { supported: [["rac_qty", "a"]] })).length,
    1,
  );
  const t0 = performance.now();
  assert.equal((await readAndClaim(sql, "rac_qty_q", worker, { wait: 1 })).length, 0);
  assert.ok(performance.now() - t0 >= 900, "the read waited for messages");
});

db.test("a claim that fails rolls its read back: the messages stay visible and unread", async ({ sql }) => {
  await defineFlow(sql, "rac_fail", [{ slug: "a", queue: "rac_fail_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('rac_fail', '{}')`;
  const before = await queueMessages(sql, "rac_fail_q");
  await assert.rejects(
    () => readAndClaim(sql, "rac_fail_q", crypto.randomUUID()),
    { code: "PFW01", message: /is not registered, so it has no recorded support set/ },
  );
  await assert.rejects(
    () => sql`select * from pgflow.read_and_claim(null, ${crypto.randomUUID()}::uuid, 30, 10)`,
    /queue_name must not be NULL/,
  );
  const after = await queueMessages(sql, "rac_fail_q");
  assert.deepEqual(after.map((m) => [m.msg_id, m.read_ct]), before.map((m) => [m.msg_id, 0]));
  assert.ok(after[0].vt_in_seconds <= 0, "still visible");
});

/**
 * Sends a read_and_claim on its own connection now (a query only built is sent when awaited:
 * after the message is there, and then the read never waits), and returns once it is seen
 * waiting on the server, with when its transaction began.
 */
async function waitingRead(
  sql: Sql,
  poller: Sql,
  appName: string,
  read: (poller: Sql) => PendingQuery<Row[]>,
): Promise<{ pending: Promise<Row[]>; readBegan: Date }> {
  const pending = read(poller).execute();
  let returned = false;
  pending.then(() => (returned = true), () => (returned = true));
  const { xact_start: readBegan } = await waitFor(
    async () =>
      (await sql`select xact_start from pg_stat_activity
                 where application_name = ${appName} and state = 'active'
                   and query like '%read_and_claim%'`)[0] ?? (returned && { xact_start: null }),
    { what: "the read to wait on the server" },
  );
  assert.equal(returned, false, "read_and_claim returned before anything was sent");
  return { pending, readBegan };
}

db.test("a task claimed after the read waited is stamped with when it started, not when the read began", async ({ sql, connect }) => {
  await defineFlow(sql, "rac_wait", [{ slug: "a", queue: "rac_wait_q" }], { mode: "routed" });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'rac_wait_q', 'test_fn', '[["rac_wait", "a"]]'::jsonb)`;
  const poller = connect({ connection: { application_name: "rac_wait_poller" } });
  const { pending, readBegan } = await waitingRead(
    sql,
    poller,
    "rac_wait_poller",
    (p) => readAndClaim(p, "rac_wait_q", worker, { wait: 60 }),
  );
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const [{ now: sentAt }] = await sql`select clock_timestamp() as now`;
  await sql`select pgflow.start_flow('rac_wait', '{}')`;
  const rows = await pending;
  assert.deepEqual(rows.map((r) => r.disposition), ["claimed"]);
  const [task] =
    await sql`select started_at from pgflow.step_tasks where queue_name = 'rac_wait_q'`;
  assert.ok(readBegan < sentAt, `the read began ${readBegan}, before the send ${sentAt}`);
  assert.ok(task.started_at >= sentAt, `started_at ${task.started_at} before the send ${sentAt}`);
});

db.test("a worker with no row claims with explicit pairs: its tasks name no worker, a long read re-stamps them", async ({ sql, connect }) => {
  // A worker whose row vanished (an operator deleted it) polls on with its explicit pairs; a task
  // names only a worker that was registered when it claimed it.
  await defineFlow(sql, "rac_gone", [{ slug: "a", queue: "rac_gone_q" }], { mode: "routed" });
  const worker = crypto.randomUUID();
  const poller = connect({ connection: { application_name: "rac_gone_poller" } });
  const { pending } = await waitingRead(
    sql,
    poller,
    "rac_gone_poller",
    (p) => readAndClaim(p, "rac_gone_q", worker, { wait: 60, supported: [["rac_gone", "a"]] }),
  );
  await new Promise((resolve) => setTimeout(resolve, 1200));
  const [{ now: sentAt }] = await sql`select clock_timestamp() as now`;
  const [run] = await sql`select run_id from pgflow.start_flow('rac_gone', '{"k": 1}')`;
  const rows = await pending;
  assert.deepEqual(rows.map((r) => [r.disposition, r.run_id, r.attempt, r.input]), [
    ["claimed", run.run_id, 1, { k: 1 }],
  ]);
  const [task] = await sql`select status, started_at, last_worker_id from pgflow.step_tasks
                           where queue_name = 'rac_gone_q'`;
  assert.deepEqual([task.status, task.last_worker_id], ["started", null]);
  assert.ok(task.started_at >= sentAt, `started_at ${task.started_at} before the send ${sentAt}`);
});

db.test("read_and_claim's defaults are the worker's (one options table)", async ({ sql }) => {
  const [{ args }] = await sql<{ args: string }[]>`
    select pg_get_function_arguments('pgflow.read_and_claim'::regproc) as args`;
  const defaultOf = (name: string) =>
    Number(new RegExp(`${name} integer DEFAULT (\\d+)`).exec(args)?.[1]);
  assert.equal(defaultOf("max_poll_seconds"), WORKER_OPTIONS.maxPollSeconds.default);
  assert.equal(defaultOf("poll_interval_ms"), WORKER_OPTIONS.pollIntervalMs.default);
});

db.test("a read looks the worker's row up itself and calls _registered_claim only to refuse it", async ({ sql }) => {
  await defineFlow(sql, "rac_reg", [{ slug: "a", queue: "rac_reg_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('rac_reg', '{"n": 1}')`;
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'rac_reg_q', 'test_fn', '[["rac_reg", "a"]]'::jsonb)`;
  // Calls of the function in one transaction: the difference of its statistics before and after
  // (a backend's counts not reported yet are in both).
  const calls = async (read: (tx: Sql) => Promise<unknown>) =>
    await sql.begin(async (tx) => {
      await tx`set local track_functions = 'pl'`;
      const count = async () =>
        (await tx`select coalesce(sum(calls), 0)::int as n from pg_stat_xact_user_functions
                  where schemaname = 'pgflow' and funcname = '_registered_claim'`)[0].n as number;
      const before = await count();
      await read(tx as unknown as Sql);
      return (await count()) - before;
    });
  let rows: Row[] = [];
  assert.equal(await calls(async (tx) => rows = await readAndClaim(tx, "rac_reg_q", worker)), 0);
  assert.deepEqual(rows.map((r) => [r.disposition, r.input]), [["claimed", { n: 1 }]]);
  await assert.rejects(
    () => readAndClaim(sql, "other_q", worker),
    // Not PFW01: the worker is registered, only not for this queue.
    { code: "22023", message: /worker .* is registered for queue 'rac_reg_q', not 'other_q'/ },
  );
  await assert.rejects(
    () => readAndClaim(sql, "rac_reg_q", crypto.randomUUID()),
    { code: "PFW01", message: /is not registered, so it has no recorded support set/ },
  );
});
