/**
 * pgflow.start_tasks: every row of the claim table (docs/design.md, Claim table), the visibility it sets, exact
 * message ids, and two connections racing for the same messages.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import {
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
  startTasks,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function snapshot(sql: Sql, queue: string) {
  const tasks =
    await sql`select * from pgflow.step_tasks where queue_name = ${queue} order by message_id`;
  const msgs = (await queueMessages(sql, queue)).map(({ vt_in_seconds: _, ...m }) => m);
  return { tasks, msgs };
}

db.test("an eligible queued task in the support set is claimed once, with vt = timeout + 2 s", async ({ sql }) => {
  await defineFlow(sql, "claim_ok", [{ slug: "a", queue: "claim_ok_q", timeout: 20 }], {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('claim_ok', '{"x": 1}')`;
  const worker = await registerWorker(sql, "claim_ok_q");
  const [msg] = await queueMessages(sql, "claim_ok_q");
  const rows = await startTasks(sql, "claim_ok_q", [msg.msg_id], worker, [["claim_ok", "a"]]);
  assert.deepEqual([...rows], [{
    message_id: msg.msg_id,
    disposition: "claimed",
    flow_slug: "claim_ok",
    run_id: run.run_id,
    step_slug: "a",
    task_index: 0,
    input: { x: 1 },
    attempt: 1,
  }]);
  const [after] = await queueMessages(sql, "claim_ok_q");
  assert.ok(
    after.vt_in_seconds > 20 && after.vt_in_seconds <= 22.5,
    `vt in ${after.vt_in_seconds}s`,
  );
  const [task] = await sql`select * from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.equal(task.status, "started");
  assert.equal(task.attempts_count, 1);
  assert.equal(task.last_worker_id, worker);
  assert.ok(task.started_at);

  // A second claim of the same message is reported as started and changes nothing.
  const before = await snapshot(sql, "claim_ok_q");
  const again = await startTasks(sql, "claim_ok_q", [msg.msg_id], worker, [["claim_ok", "a"]]);
  assert.equal(again[0].disposition, "started");
  assert.equal(again[0].attempt, null);
  assert.equal(again[0].input, null);
  assert.deepEqual(await snapshot(sql, "claim_ok_q"), before);
});

db.test("unknown, unsupported and ineligible messages are reported and left untouched", async ({ sql }) => {
  await defineFlow(sql, "claim_mix", [{ slug: "a", queue: "claim_mix_q" }, {
    slug: "b",
    queue: "claim_mix_q",
  }], {
    mode: "routed",
  });
  const [r1] = await sql`select * from pgflow.start_flow('claim_mix', '{}')`;
  const [r2] = await sql`select * from pgflow.start_flow('claim_mix', '{}')`;
  // A foreign message sent straight to the queue.
  const [{ send: foreign }] =
    await sql`select * from pgmq.send('claim_mix_q', '{"flow_slug": "claim_mix", "step_slug": "a"}'::jsonb)`;
  // Run 2 is marked failed by hand, leaving its messages in the queue: its tasks are ineligible.
  await sql`update pgflow.runs set status = 'failed' where run_id = ${r2.run_id}`;
  const tasks =
    await sql`select run_id, step_slug, message_id::text from pgflow.step_tasks order by message_id`;
  const id = (run: string, step: string) =>
    tasks.find((t) => t.run_id === run && t.step_slug === step)!.message_id;

  const worker = await registerWorker(sql, "claim_mix_q");
  const before = await snapshot(sql, "claim_mix_q");
  const rows = await startTasks(
    sql,
    "claim_mix_q",
    [id(r1.run_id, "b"), foreign, id(r2.run_id, "a"), "999999"],
    worker,
    [["claim_mix", "a"]],
  );
  const byId = Object.fromEntries(rows.map((r) => [r.message_id, r.disposition]));
  assert.deepEqual(byId, {
    [id(r1.run_id, "b")]: "unsupported",
    [foreign]: "unknown",
    [id(r2.run_id, "a")]: "ineligible",
    "999999": "unknown",
  });
  // The owning task's identity comes back (an unknown message has none); input and attempt never.
  const owner: Record<string, [string | null, string | null, string | null]> = {
    [id(r1.run_id, "b")]: ["claim_mix", r1.run_id, "b"],
    [foreign]: [null, null, null],
    [id(r2.run_id, "a")]: ["claim_mix", r2.run_id, "a"],
    "999999": [null, null, null],
  };
  for (const r of rows) {
    assert.deepEqual([r.flow_slug, r.run_id, r.step_slug, r.input, r.attempt], [
      ...owner[r.message_id],
      null,
      null,
    ]);
  }
  assert.deepEqual(await snapshot(sql, "claim_mix_q"), before, "nothing changed");
});

db.test("a supported task of a completed step or failed run is ineligible and not revived", async ({ sql }) => {
  await defineFlow(sql, "claim_done", [{ slug: "a", queue: "claim_done_q" }], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('claim_done', '{}')`;
  const worker = await registerWorker(sql, "claim_done_q");
  const [row] = await readAndStart(sql, "claim_done_q", worker, [["claim_done", "a"]]);
  await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '1', ${row.attempt})`;
  const again = await startTasks(sql, "claim_done_q", [row.message_id], worker, [[
    "claim_done",
    "a",
  ]]);
  assert.equal(again[0].disposition, "ineligible");
  const [task] =
    await sql`select status, attempts_count from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.deepEqual([task.status, task.attempts_count], ["completed", 1]);
});

db.test("the claim matches the queue too: the same id on another queue is another task", async ({ sql }) => {
  await defineFlow(sql, "claim_q1", [{ slug: "a", queue: "claim_q1_q" }], { mode: "routed" });
  await defineFlow(sql, "claim_q2", [{ slug: "a", queue: "claim_q2_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('claim_q1', '{}')`;
  await sql`select pgflow.start_flow('claim_q2', '{}')`;
  const [m1] = await queueMessages(sql, "claim_q1_q");
  const [m2] = await queueMessages(sql, "claim_q2_q");
  assert.equal(m1.msg_id, m2.msg_id, "both queues start at id 1");
  const worker = await registerWorker(sql, "claim_q2_q");
  const rows = await startTasks(sql, "claim_q2_q", [m1.msg_id], worker, [["claim_q1", "a"]]);
  assert.equal(rows[0].disposition, "unsupported", "the task on claim_q2_q belongs to claim_q2");
  const [t1] = await sql`select status from pgflow.step_tasks where flow_slug = 'claim_q1'`;
  assert.equal(t1.status, "queued");
});

db.test("message ids above 2^53 round-trip exactly", async ({ sql }) => {
  await defineFlow(sql, "claim_big", [{ slug: "a", queue: "claim_big_q" }], { mode: "routed" });
  await sql`select setval('pgmq.q_claim_big_q_msg_id_seq', 9007199254740993)`;
  const [run] = await sql`select * from pgflow.start_flow('claim_big', '{}')`;
  const [task] =
    await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.equal(task.id, "9007199254740994");
  const worker = await registerWorker(sql, "claim_big_q");
  const rows = await startTasks(
    sql,
    "claim_big_q",
    ["9007199254740994", "9007199254740995"],
    worker,
    [[
      "claim_big",
      "a",
    ]],
  );
  assert.deepEqual(rows.map((r) => [r.message_id, r.disposition]), [
    ["9007199254740994", "claimed"],
    ["9007199254740995", "unknown"],
  ]);
  await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '"done"', 1)`;
  const [archived] = await sql`select msg_id::text as id from pgmq.a_claim_big_q`;
  assert.equal(archived.id, "9007199254740994");
});

db.test("bad support sets are rejected with the value", async ({ sql }) => {
  const worker = await registerWorker(sql, "claim_bad_q");
  await assert.rejects(
    () =>
      sql`select * from pgflow.start_tasks('claim_bad_q', '{1}', ${worker}, '{"flow": "step"}')`,
    /supported must be a JSON array of \[flow_slug, step_slug\] pairs, got \{"flow": "step"\}/,
  );
  await assert.rejects(
    () => sql`select * from pgflow.start_tasks('claim_bad_q', '{1}', ${worker}, '[["flow"]]')`,
    /supported must be a JSON array/,
  );
});

db.test("supported => NULL claims against the set the worker registered, for its own queue only", async ({ sql }) => {
  await defineFlow(sql, "claim_reg", [{ slug: "a", queue: "claim_reg_q" }, {
    slug: "b",
    queue: "claim_reg_q",
  }], { mode: "routed" });
  await sql`select pgflow.start_flow('claim_reg', '{"x": 1}')`;
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'claim_reg_q', 'test_fn',
                                          '[["claim_reg", "a"], ["other", "a"]]'::jsonb)`;
  const [keys] = await sql`select supported_keys from pgflow.workers where worker_id = ${worker}`;
  assert.deepEqual(keys.supported_keys, { "claim_reg\u001fa": true, "other\u001fa": true });
  const msgs = await queueMessages(sql, "claim_reg_q");
  assert.equal(msgs.length, 2);
  const rows = await sql`select message_id::text as message_id, disposition, step_slug, input
    from pgflow.start_tasks('claim_reg_q', ${
    msgs.map((m) => m.msg_id)
  }::bigint[], ${worker}, null)`;
  assert.deepEqual(
    rows.map((r) => [r.disposition, r.step_slug, r.input]),
    [["claimed", "a", { x: 1 }], ["unsupported", "b", null]],
  );

  // A row written without register_worker (no keys yet) still claims by its pairs.
  const bare = crypto.randomUUID();
  await sql`insert into pgflow.workers (worker_id, queue_name, function_name, supported)
            values (${bare}, 'claim_reg_q', 'test_fn', '[["claim_reg", "b"]]')`;
  const [b] = await sql`select disposition, step_slug
    from pgflow.start_tasks('claim_reg_q', ${[msgs[1].msg_id]}::bigint[], ${bare}, null)`;
  assert.deepEqual([b.disposition, b.step_slug], ["claimed", "b"]);

  const before = await snapshot(sql, "claim_reg_q");
  await assert.rejects(
    () => sql`select * from pgflow.start_tasks('other_q', '{1}', ${worker}, null)`,
    // Not PFW01: the worker is registered, only not for this queue (no fallback should hide it).
    { code: "22023", message: /worker .* is registered for queue 'claim_reg_q', not 'other_q'/ },
  );
  await assert.rejects(
    () => sql`select * from pgflow.start_tasks('claim_reg_q', '{1}', ${crypto.randomUUID()}, null)`,
    { code: "PFW01", message: /is not registered, so it has no recorded support set/ },
  );
  assert.deepEqual(await snapshot(sql, "claim_reg_q"), before);
});

db.test("two connections claiming the same messages at once: exactly one claim each", async ({ sql, connect }) => {
  await defineFlow(sql, "claim_race", [{ slug: "a", queue: "claim_race_q" }], { mode: "routed" });
  for (let i = 0; i < 20; i++) {
    await sql`select pgflow.start_flow('claim_race', ${sql.json({ i })})`;
  }
  const ids = (await queueMessages(sql, "claim_race_q")).map((m) => m.msg_id);
  const w1 = await registerWorker(sql, "claim_race_q");
  const w2 = await registerWorker(sql, "claim_race_q");
  const a = connect();
  const b = connect();
  for (let round = 0; round < 5; round++) {
    await sql`update pgflow.step_tasks set status = 'queued', attempts_count = 0`;
    const [ra, rb] = await Promise.all([
      startTasks(a, "claim_race_q", ids, w1, [["claim_race", "a"]]),
      startTasks(b, "claim_race_q", ids, w2, [["claim_race", "a"]]),
    ]);
    const claimedA = ra.filter((r) => r.disposition === "claimed").map((r) => r.message_id);
    const claimedB = rb.filter((r) => r.disposition === "claimed").map((r) => r.message_id);
    assert.equal(
      claimedA.length + claimedB.length,
      ids.length,
      `round ${round}: every message claimed once`,
    );
    assert.deepEqual(
      claimedA.filter((id) => claimedB.includes(id)),
      [],
      "no message claimed twice",
    );
    const [{ max }] = await sql`select max(attempts_count) as max from pgflow.step_tasks`;
    assert.equal(max, 1);
  }
});

db.test("a claim whose message has vanished fails whole: no task is started without its vt set", async ({ sql }) => {
  await defineFlow(sql, "claim_gone", [{ slug: "a", queue: "claim_gone_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('claim_gone', '{}')`;
  await sql`select pgflow.start_flow('claim_gone', '{}')`;
  const ids = (await queueMessages(sql, "claim_gone_q")).map((m) => m.msg_id);
  // Someone deletes one message behind pgflow's back.
  await sql`select pgmq.delete('claim_gone_q', ${ids[0]}::bigint)`;
  const worker = await registerWorker(sql, "claim_gone_q");
  await assert.rejects(
    () => startTasks(sql, "claim_gone_q", ids, worker, [["claim_gone", "a"]]),
    /start_tasks: queue claim_gone_q holds only 1 of the 2 claimed messages/,
  );
  const tasks =
    await sql`select status, attempts_count from pgflow.step_tasks where flow_slug = 'claim_gone'`;
  assert.deepEqual(tasks.map((t) => `${t.status}/${t.attempts_count}`), ["queued/0", "queued/0"]);
  // The intact message is still claimable on its own.
  const [ok] = await startTasks(sql, "claim_gone_q", [ids[1]], worker, [["claim_gone", "a"]]);
  assert.equal(ok.disposition, "claimed");
});

db.test("a run failing while a claim holds one of its messages: no deadlock, one clear outcome", async ({ sql, connect }) => {
  await defineFlow(sql, "claim_dl", [
    { slug: "a", queue: "claim_dl_q", maxAttempts: 1 },
    { slug: "b", queue: "claim_dl_q", maxAttempts: 1 },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('claim_dl', '{}')`;
  const worker = await registerWorker(sql, "claim_dl_q");
  const tasks =
    await sql`select step_slug, message_id::text as id from pgflow.step_tasks where run_id = ${run.run_id}`;
  const id = (step: string) => tasks.find((t) => t.step_slug === step)!.id;
  await startTasks(sql, "claim_dl_q", [id("a")], worker, [["claim_dl", "a"]]);

  // A claims like read_and_claim: it holds b's message (read in its transaction) while it claims.
  const a = connect();
  const b = connect();
  let failing!: Promise<unknown>;
  const claim = await a.begin(async (tx) => {
    await tx`select msg_id from pgmq.read('claim_dl_q', 30, 1)`;
    // B fails task a for good: the run fails and must archive b's message, which A holds.
    // postgres.js queries are lazy: .execute() sends it now.
    failing = b`select pgflow.fail_task(${run.run_id}, 'a', 0, 'fatal', 1)`.execute();
    await waitFor(async () =>
      (await sql`select count(*)::int as n from pg_stat_activity
                 where wait_event_type = 'Lock' and query like '%fail_task%'`)[0].n === 1, {
      what: "fail_task to wait for the message A holds",
    });
    return await startTasks(tx, "claim_dl_q", [id("b")], worker, [["claim_dl", "b"]]);
  });
  await failing;
  assert.equal(claim[0].disposition, "claimed", "the claim went first");
  const [state] = await sql`select status from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(state.status, "failed");
  const rows =
    await sql`select step_slug, status from pgflow.step_tasks where run_id = ${run.run_id} order by 1`;
  assert.deepEqual(rows.map((r) => `${r.step_slug}:${r.status}`), ["a:failed", "b:cancelled"]);
  assert.equal((await queueMessages(sql, "claim_dl_q")).length, 0, "both messages archived");
});
