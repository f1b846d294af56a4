/** pgflow.complete_task and pgflow.fail_task: exact outputs, release, retries and run failure. */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  defineFlow,
  makeVisible,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test('outputs are stored exactly: 0, false, "" and null stay distinct', async ({ sql }) => {
  const values = [0, false, "", null, [], {}];
  await defineFlow(sql, "falsy", values.map((_, i) => ({ slug: `s${i}`, queue: "falsy_q" })), {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('falsy', '{}')`;
  const worker = await registerWorker(sql, "falsy_q");
  const rows = await readAndStart(sql, "falsy_q", worker, values.map((_, i) => ["falsy", `s${i}`]));
  assert.equal(rows.length, values.length);
  for (const r of rows) {
    const value = values[Number(r.step_slug!.slice(1))];
    await sql`select pgflow.complete_task(${r.run_id}, ${r.step_slug}, 0, ${
      sql.json(value as never)
    }, ${r.attempt})`;
  }
  const states =
    await sql`select step_slug, output from pgflow.step_states where run_id = ${run.run_id} order by step_slug`;
  assert.deepEqual(states.map((s) => s.output), values);
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, Object.fromEntries(values.map((v, i) => [`s${i}`, v])));
});

db.test("completion releases dependents onto their own queues with an object of dependency outputs", async ({ sql }) => {
  await defineFlow(sql, "fanin", [
    { slug: "left", queue: "fanin_a" },
    { slug: "right", queue: "fanin_b" },
    { slug: "join", deps: ["left", "right"], queue: "fanin_c" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('fanin', '{"n": 2}')`;
  const wa = await registerWorker(sql, "fanin_a");
  const wb = await registerWorker(sql, "fanin_b");
  const wc = await registerWorker(sql, "fanin_c");
  const [l] = await readAndStart(sql, "fanin_a", wa, [["fanin", "left"]]);
  await sql`select pgflow.complete_task(${run.run_id}, 'left', 0, ${
    sql.json(l.input as never)
  }, ${l.attempt})`;
  assert.equal((await queueMessages(sql, "fanin_c")).length, 0, "join waits for right");
  const [r] = await readAndStart(sql, "fanin_b", wb, [["fanin", "right"]]);
  await sql`select pgflow.complete_task(${run.run_id}, 'right', 0, '"r"', ${r.attempt})`;
  const msgs = await queueMessages(sql, "fanin_c");
  assert.equal(msgs.length, 1);
  const [task] = await sql`select queue_name, message_id::text from pgflow.step_tasks
                           where run_id = ${run.run_id} and step_slug = 'join'`;
  assert.deepEqual([task.queue_name, task.message_id], ["fanin_c", msgs[0].msg_id]);
  const [j] = await readAndStart(sql, "fanin_c", wc, [["fanin", "join"]]);
  assert.deepEqual(j.input, { left: { n: 2 }, right: "r" });
  assert.equal(r.disposition, "claimed");
});

db.test("late and duplicate completions are ignored without error", async ({ sql }) => {
  await defineFlow(sql, "dup", [{ slug: "a", queue: "dup_q" }, {
    slug: "b",
    deps: ["a"],
    queue: "dup_q",
  }], {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('dup', '{}')`;
  const worker = await registerWorker(sql, "dup_q");
  await readAndStart(sql, "dup_q", worker, [["dup", "a"]]);
  const first = await sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '1', 1)`;
  assert.equal(first.length, 1);
  const second = await sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '2', 1)`;
  assert.equal(second.length, 0);
  const unknown = await sql`select * from pgflow.complete_task(gen_random_uuid(), 'a', 0, '2', 1)`;
  assert.equal(unknown.length, 0);
  const queuedB = await sql`select * from pgflow.complete_task(${run.run_id}, 'b', 0, '3', 0)`;
  assert.equal(queuedB.length, 0, "a queued (unclaimed) task cannot be completed");
  const [a] =
    await sql`select output from pgflow.step_states where run_id = ${run.run_id} and step_slug = 'a'`;
  assert.equal(a.output, 1);
  const [b] =
    await sql`select status from pgflow.step_tasks where run_id = ${run.run_id} and step_slug = 'b'`;
  assert.equal(b.status, "queued");
});

db.test("a failure retries on the task's own queue with exponential backoff", async ({ sql }) => {
  await defineFlow(sql, "retry", [{ slug: "a", queue: "retry_q", maxAttempts: 3, baseDelay: 4 }], {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('retry', '{}')`;
  const worker = await registerWorker(sql, "retry_q");
  for (const [attempt, delay] of [[1, 4], [2, 8]]) {
    const [row] = await readAndStart(sql, "retry_q", worker, [["retry", "a"]]);
    assert.equal(row.attempt, attempt);
    await sql`select pgflow.fail_task(${run.run_id}, 'a', 0, ${`boom ${attempt}`}, ${attempt})`;
    const [task] =
      await sql`select status, error_message, attempts_count from pgflow.step_tasks where run_id = ${run.run_id}`;
    assert.deepEqual([task.status, task.error_message, task.attempts_count], [
      "queued",
      `boom ${attempt}`,
      attempt,
    ]);
    const [msg] = await queueMessages(sql, "retry_q");
    assert.ok(
      Math.abs(msg.vt_in_seconds - delay) < 1.5,
      `retry ${attempt} waits ${delay}s, got ${msg.vt_in_seconds}`,
    );
    await makeVisible(sql, "retry_q");
  }
  const [row] = await readAndStart(sql, "retry_q", worker, [["retry", "a"]]);
  assert.equal(row.attempt, 3);
  await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '"third time"', ${row.attempt})`;
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { a: "third time" }]);
});

db.test("exhaustion fails step and run and leaves no message of the run in any queue", async ({ sql }) => {
  await defineFlow(sql, "doomed", [
    { slug: "root", queue: "doomed_a" },
    { slug: "sib1", deps: ["root"], queue: "doomed_b", maxAttempts: 1 },
    { slug: "sib2", deps: ["root"], queue: "doomed_c" },
    { slug: "sib3", deps: ["root"], queue: "doomed_c" },
  ], { mode: "routed", maxAttempts: 2 });
  const [run] = await sql`select * from pgflow.start_flow('doomed', '{}')`;
  const [other] = await sql`select * from pgflow.start_flow('doomed', '{}')`;
  const wa = await registerWorker(sql, "doomed_a");
  const wb = await registerWorker(sql, "doomed_b");
  const wc = await registerWorker(sql, "doomed_c");
  for (const r of await readAndStart(sql, "doomed_a", wa, [["doomed", "root"]])) {
    await sql`select pgflow.complete_task(${r.run_id}, 'root', 0, '{}', ${r.attempt})`;
  }
  // sib2 of our run is started, sib3 queued, when sib1 fails for good.
  const claimedC = await sql`select * from pgflow.start_tasks('doomed_c',
    (select array_agg(message_id) from pgflow.step_tasks where run_id = ${run.run_id} and step_slug = 'sib2'),
    ${wc}, '[["doomed", "sib2"]]')`;
  assert.equal(claimedC[0].disposition, "claimed");
  const [b] = (await readAndStart(sql, "doomed_b", wb, [["doomed", "sib1"]])).filter((r) =>
    r.run_id === run.run_id
  );
  await sql`select pgflow.fail_task(${run.run_id}, 'sib1', 0, 'fatal', 1)`;
  assert.equal(b.attempt, 1);

  const [failed] =
    await sql`select status, error_message from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([failed.status, failed.error_message], ["failed", "fatal"]);
  const states =
    await sql`select step_slug, status from pgflow.step_states where run_id = ${run.run_id} order by step_slug`;
  assert.deepEqual(states.map((s) => `${s.step_slug}:${s.status}`), [
    "root:completed",
    "sib1:failed",
    "sib2:started",
    "sib3:started",
  ]);
  const tasks =
    await sql`select step_slug, status, queue_name, message_id::text from pgflow.step_tasks
                          where run_id = ${run.run_id} order by step_slug`;
  assert.deepEqual(tasks.map((t) => `${t.step_slug}:${t.status}`), [
    "root:completed",
    "sib1:failed",
    "sib2:cancelled",
    "sib3:cancelled",
  ]);
  for (const q of ["doomed_a", "doomed_b", "doomed_c"]) {
    const live = (await queueMessages(sql, q)).map((m) => m.msg_id);
    const archived = (await archivedMessages(sql, q)).map((m) => m.msg_id);
    for (const t of tasks.filter((t) => t.queue_name === q)) {
      assert.ok(!live.includes(t.message_id), `${t.step_slug}'s message left ${q}`);
      assert.ok(archived.includes(t.message_id), `${t.step_slug}'s message archived in ${q}`);
    }
  }
  // The other run is untouched.
  const otherTasks =
    await sql`select step_slug, status from pgflow.step_tasks where run_id = ${other.run_id} order by step_slug`;
  assert.deepEqual(otherTasks.map((t) => `${t.step_slug}:${t.status}`), [
    "root:completed",
    "sib1:started", // claimed in the same batch as ours
    "sib2:queued",
    "sib3:queued",
  ]);
  // A late completion of the cancelled task changes nothing.
  assert.equal(
    (await sql`select * from pgflow.complete_task(${run.run_id}, 'sib2', 0, '1', 1)`).length,
    0,
  );
  assert.equal(
    (await sql`select * from pgflow.fail_task(${run.run_id}, 'sib2', 0, 'x', 1)`).length,
    0,
  );
});

db.test("start_delay holds a step's message back", async ({ sql }) => {
  await defineFlow(sql, "delayed", [{ slug: "a", queue: "delayed_q", startDelay: 30 }], {
    mode: "routed",
  });
  await sql`select pgflow.start_flow('delayed', '{}')`;
  const [msg] = await queueMessages(sql, "delayed_q");
  assert.ok(msg.vt_in_seconds > 28 && msg.vt_in_seconds <= 30.5, `vt in ${msg.vt_in_seconds}s`);
  assert.equal((await sql`select * from pgmq.read('delayed_q', 5, 10)`).length, 0);
});

db.test("complete_tasks completes a batch exactly like complete_task, duplicates ignored", async ({ sql }) => {
  const values = [0, false, "", null, [1], { a: 1 }];
  await defineFlow(sql, "batchdone", [{ slug: "a", queue: "batchdone_q" }, {
    slug: "b",
    deps: ["a"],
    queue: "batchdone_q",
  }], { mode: "routed" });
  const runs: string[] = [];
  for (let i = 0; i < values.length; i++) {
    runs.push((await sql`select * from pgflow.start_flow('batchdone', '{}')`)[0].run_id);
  }
  const worker = await registerWorker(sql, "batchdone_q");
  const rows = await readAndStart(sql, "batchdone_q", worker, [["batchdone", "a"], [
    "batchdone",
    "b",
  ]]);
  assert.equal(rows.length, values.length);
  const outputs = rows.map((r) => JSON.stringify(values[runs.indexOf(r.run_id!)]));
  // The first task twice: the second is a duplicate and changes nothing.
  const done = await sql`select run_id, output from pgflow.complete_tasks(
    ${[...rows.map((r) => r.run_id!), rows[0].run_id!]}::uuid[],
    ${[...rows.map(() => "a"), "a"]}::text[], ${[...rows.map(() => 0), 0]}::integer[],
    ${[...outputs, '"dup"']}::text[]::jsonb[], ${[...rows.map((r) => r.attempt!), 1]}::integer[])`;
  assert.equal(done.length, values.length);
  const states = await sql`select run_id, output, status from pgflow.step_states
    where step_slug = 'a' and run_id = any (${runs}::uuid[])`;
  for (const s of states) {
    assert.equal(s.status, "completed");
    assert.deepEqual(s.output, values[runs.indexOf(s.run_id)]);
  }
  // Every dependent was released onto the queue, every completed message archived.
  const b = await readAndStart(sql, "batchdone_q", worker, [["batchdone", "b"]]);
  assert.deepEqual(
    b.map((r) => r.input).sort((x, y) => JSON.stringify(x).localeCompare(JSON.stringify(y))),
    values.map((v) => ({ a: v })).sort((x, y) =>
      JSON.stringify(x).localeCompare(JSON.stringify(y))
    ),
  );
  assert.equal((await archivedMessages(sql, "batchdone_q")).length, values.length);
  await assert.rejects(
    () => sql`select * from pgflow.complete_tasks('{}'::uuid[], '{a}', '{}', '{}', '{}')`,
    /complete_tasks: 0 run ids, 1 step slugs, 0 task indexes, 0 outputs and 0 attempts/,
  );
});

db.test("a report for an older attempt is late: it neither completes nor fails the running attempt", async ({ sql }) => {
  await defineFlow(sql, "attempts", [{ slug: "a", queue: "attempts_q", maxAttempts: 3 }], {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('attempts', '{}')`;
  const worker = await registerWorker(sql, "attempts_q");
  const [first] = await readAndStart(sql, "attempts_q", worker, [["attempts", "a"]]);
  assert.equal(first.attempt, 1);
  await sql`select pgflow.fail_task(${run.run_id}, 'a', 0, 'first failed', 1)`;
  await makeVisible(sql, "attempts_q");
  const [second] = await readAndStart(sql, "attempts_q", worker, [["attempts", "a"]]);
  assert.equal(second.attempt, 2);

  // Attempt 1's reports arrive again (a lost reply, retried): both are ignored.
  assert.equal(
    (await sql`select * from pgflow.fail_task(${run.run_id}, 'a', 0, 'retried report', 1)`).length,
    0,
  );
  assert.equal(
    (await sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '"stale"', 1)`).length,
    0,
  );
  assert.equal(
    (await sql`select * from pgflow.complete_tasks(${[
      run.run_id,
    ]}::uuid[], '{a}', '{0}', '{"\\"stale\\""}', '{1}')`).length,
    0,
  );
  const [task] =
    await sql`select status, attempts_count, error_message from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.deepEqual([task.status, task.attempts_count, task.error_message], [
    "started",
    2,
    "first failed",
  ]);

  // The current attempt's report counts.
  assert.equal(
    (await sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '"fresh"', 2)`).length,
    1,
  );
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { a: "fresh" }]);
});

db.test("a report without its attempt is refused, naming what to pass, and changes nothing", async ({ sql }) => {
  await defineFlow(sql, "no_attempt", [{ slug: "a", queue: "no_attempt_q", maxAttempts: 3 }], {
    mode: "routed",
  });
  const [run] = await sql`select * from pgflow.start_flow('no_attempt', '{}')`;
  const worker = await registerWorker(sql, "no_attempt_q");
  const [claimed] = await readAndStart(sql, "no_attempt_q", worker, [["no_attempt", "a"]]);
  assert.equal(claimed.attempt, 1);
  const refusals: [string, () => Promise<unknown>][] = [
    ["complete_task", () => sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '1')`],
    [
      "complete_task",
      () => sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '1', null)`,
    ],
    ["fail_task", () => sql`select * from pgflow.fail_task(${run.run_id}, 'a', 0, 'boom')`],
    [
      "complete_tasks",
      () =>
        sql`select * from pgflow.complete_tasks(${[run.run_id]}::uuid[], '{a}', '{0}', '{"1"}')`,
    ],
    [
      "complete_task",
      () =>
        sql`select * from pgflow.complete_tasks(${[
          run.run_id,
        ]}::uuid[], '{a}', '{0}', '{"1"}', '{NULL}')`,
    ],
  ];
  for (const [fn, call] of refusals) {
    await assert.rejects(
      call,
      new RegExp(`${fn}: .*attempt`),
      `${fn} without an attempt is refused`,
    );
  }
  await assert.rejects(
    () => sql`select * from pgflow.complete_task(${run.run_id}, 'a', 0, '1')`,
    /complete_task: attempt is required \(task a \[0\] of run [0-9a-f-]{36}\)/,
  );
  const [task] =
    await sql`select status, attempts_count from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.deepEqual([task.status, task.attempts_count], ["started", 1]);
  // With the attempt it was claimed with, the same report counts.
  await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '1', ${claimed.attempt})`;
  const [done] = await sql`select status from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(done.status, "completed");
});

db.test("fail_task deferred: the message is hidden for exactly retry_delay, the attempt is kept and does not count", async ({ sql }) => {
  // maxAttempts 1 and baseDelay 600: a counted failure would fail the run, a backoff would be 600 s.
  await defineFlow(sql, "defer_sql", [{ slug: "s" }], { maxAttempts: 1, baseDelay: 600 });
  const [run] = await sql`select * from pgflow.start_flow('defer_sql', '{}')`;
  const worker = await registerWorker(sql, "defer_sql");
  for (const attempt of [1, 2]) {
    const [claimed] = await readAndStart(sql, "defer_sql", worker, [["defer_sql", "s"]]);
    assert.equal(claimed.attempt, attempt);
    const [task] = await sql`
      select status from pgflow.fail_task(${run.run_id}, 's', 0, 'retry after 5 s', ${attempt},
                                          outcome => 'deferred', retry_delay => 5)`;
    assert.equal(task.status, "queued");
    // The vt was set 5 s from the clock in fail_task's transaction, just before the history row.
    const [hidden] = await sql`
      select extract(epoch from m.vt - a.ended_at)::float8 as seconds
      from pgflow.task_attempts a, pgmq.q_defer_sql m
      where a.run_id = ${run.run_id} and a.attempt = ${attempt}`;
    assert.ok(hidden.seconds > 4.9 && hidden.seconds <= 5, `vt - ended_at = ${hidden.seconds} s`);
    await makeVisible(sql, "defer_sql");
  }
  const [row] = await sql`
    select status, attempts_count, uncounted_attempts from pgflow.step_tasks
    where run_id = ${run.run_id}`;
  assert.deepEqual({ ...row }, { status: "queued", attempts_count: 2, uncounted_attempts: 2 });
  const outcomes = await sql`
    select attempt, outcome from pgflow.task_attempts where run_id = ${run.run_id} order by attempt`;
  assert.deepEqual(outcomes.map((o) => [o.attempt, o.outcome]), [[1, "deferred"], [2, "deferred"]]);
  // The deferrals left maxAttempts 1 untouched: the first failure that counts exhausts it.
  const [claimed] = await readAndStart(sql, "defer_sql", worker, [["defer_sql", "s"]]);
  await sql`select pgflow.fail_task(${run.run_id}, 's', 0, 'boom', ${claimed.attempt})`;
  const [ended] = await sql`select status from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(ended.status, "failed");
});
