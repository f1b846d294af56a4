/**
 * Waiting steps (0280_events.sql): an event step waits with no task and no message and completes
 * with the event's payload; an early event is kept and delivered when the wait starts; the first
 * event wins and later ones are ignored and reported; keyed events reach every wait with their
 * key; timeouts fail or complete with a value; sleeps wake on the tick; tokens are single use and
 * expire; waits are invisible to reads, stalled recovery and coverage; cancel, retry and resume
 * handle them; only service_role may send. Time is faked through fire_due_schedules' `now`.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { compileFlow, defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { Flow } from "../../mod.ts";

const db = testDatabase(import.meta.url);

interface Delivery {
  run_id: string | null;
  step_slug: string | null;
  status: "delivered" | "kept" | "ignored" | "refused";
  reason?: string;
}

/** approve waits for "approved" (key $.orderId); notify runs after it. */
async function approvalFlow(
  sql: Sql,
  slug: string,
  wait: Record<string, unknown> = {},
  withSubmit = false,
): Promise<void> {
  await defineFlow(sql, slug, [
    ...(withSubmit ? [{ slug: "submit" }] : []),
    { slug: "approve", deps: withSubmit ? ["submit"] : [] },
    { slug: "notify", deps: ["approve"] },
  ]);
  await sql`select pgflow._set_wait(${slug}, 'approve',
    ${sql.json({ kind: "event", event: "approved", key: "$.orderId", ...wait } as never)})`;
}

async function start(sql: Sql, slug: string, input: unknown): Promise<string> {
  const [{ run_id }] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow(${slug}, ${sql.json(input as never)})`;
  return run_id;
}

async function send(
  sql: Sql,
  args: { runId?: string; key?: string; payload?: unknown; event?: string },
): Promise<Delivery[]> {
  const [{ r }] = await sql<{ r: { results: Delivery[] } }[]>`
    select pgflow.send_event(${args.event ?? "approved"}, ${
    sql.json((args.payload ?? null) as never)
  },
      run_id => ${args.runId ?? null}::uuid, key => ${args.key ?? null}) as r`;
  return r.results;
}

async function steps(sql: Sql, runId: string): Promise<Record<string, string>> {
  const rows = await sql<{ step_slug: string; status: string }[]>`
    select step_slug, status from pgflow.step_states where run_id = ${runId}`;
  return Object.fromEntries(rows.map((r) => [r.step_slug, r.status]));
}

async function runStatus(sql: Sql, runId: string): Promise<string> {
  const [{ status }] = await sql<{ status: string }[]>`
    select status from pgflow.runs where run_id = ${runId}`;
  return status;
}

async function tickAt(sql: Sql, secondsFromNow: number): Promise<void> {
  await sql`select pgflow.fire_due_schedules(clock_timestamp() + make_interval(secs => ${secondsFromNow}))`;
}

db.test("an event step waits without task or message and completes with the payload", async ({ sql }) => {
  await approvalFlow(sql, "ev_basic");
  const runId = await start(sql, "ev_basic", { orderId: "A-1" });
  assert.deepEqual(await steps(sql, runId), { approve: "started", notify: "created" });
  const [{ tasks }] =
    await sql`select count(*)::int as tasks from pgflow.step_tasks where run_id = ${runId}`;
  assert.equal(tasks, 0, "a wait has no task");
  const [{ n }] = await sql`select count(*)::int as n from pgmq.read('ev_basic', 30, 10)`;
  assert.equal(n, 0, "a wait has no message");
  const [wait] = await sql`select waiting_for, wait_key, wait_until from pgflow.step_states
                           where run_id = ${runId} and step_slug = 'approve'`;
  assert.deepEqual(wait, { waiting_for: "approved", wait_key: "A-1", wait_until: null });

  assert.deepEqual(
    (await send(sql, { runId, payload: { ok: true, by: "ann" } })).map((d) => d.status),
    ["delivered"],
  );
  assert.deepEqual(await steps(sql, runId), { approve: "completed", notify: "started" });
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${runId} and step_slug = 'approve'`;
  assert.deepEqual(output, { ok: true, by: "ann" });

  const again = await send(sql, { runId, payload: { ok: false } });
  assert.deepEqual(again.map((d) => [d.status, d.reason]), [["ignored", "step completed"]]);
  const [{ output: kept }] = await sql`select output from pgflow.step_states
                                       where run_id = ${runId} and step_slug = 'approve'`;
  assert.deepEqual(kept, { ok: true, by: "ann" }, "the first event wins");
});

db.test("an event before the wait is kept and delivered when the wait starts", async ({ sql }) => {
  await approvalFlow(sql, "ev_early", {}, true);
  const runId = await start(sql, "ev_early", { orderId: "E-1" });
  assert.deepEqual(await steps(sql, runId), {
    submit: "started",
    approve: "created",
    notify: "created",
  });
  const early = await send(sql, { runId, payload: "yes" });
  assert.equal(early[0].status, "kept");
  const dup = await send(sql, { runId, payload: "no" });
  assert.deepEqual(dup.map((d) => d.status), ["ignored"]);

  const worker = await registerWorker(sql, "ev_early");
  const [claimed] = await readAndStart(sql, "ev_early", worker, [["ev_early", "submit"]]);
  await sql`select pgflow.complete_task(${runId}, 'submit', 0, '"done"'::jsonb, ${claimed.attempt})`;
  assert.deepEqual(await steps(sql, runId), {
    submit: "completed",
    approve: "completed",
    notify: "started",
  });
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${runId} and step_slug = 'approve'`;
  assert.equal(output, "yes");
  const [{ n }] = await sql`select count(*)::int as n from pgflow.pending_events`;
  assert.equal(n, 0, "a delivered early event is not kept");
});

db.test("keyed events reach every wait of their key; late ones are ignored", async ({ sql }) => {
  await approvalFlow(sql, "ev_keyed");
  const a = await start(sql, "ev_keyed", { orderId: "K-1" });
  const b = await start(sql, "ev_keyed", { orderId: "K-1" });
  const c = await start(sql, "ev_keyed", { orderId: "K-2" });
  const sent = await send(sql, { key: "K-1", payload: 1 });
  assert.deepEqual(sent.map((d) => d.status).sort(), ["delivered", "delivered"]);
  assert.equal((await steps(sql, a)).approve, "completed");
  assert.equal((await steps(sql, b)).approve, "completed");
  assert.equal((await steps(sql, c)).approve, "started");
  const late = await send(sql, { key: "K-1", payload: 2 });
  assert.deepEqual(late.map((d) => [d.status, d.reason]), [
    ["ignored", "step completed"],
    ["ignored", "step completed"],
  ]);
  // No wait for K-3 yet: kept, and taken by the first run that waits for it.
  assert.equal((await send(sql, { key: "K-3", payload: 3 }))[0].status, "kept");
  assert.equal((await send(sql, { key: "K-3", payload: 4 }))[0].status, "ignored");
  const d = await start(sql, "ev_keyed", { orderId: "K-3" });
  assert.equal((await steps(sql, d)).approve, "completed");
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${d} and step_slug = 'approve'`;
  assert.equal(output, 3);
  const e = await start(sql, "ev_keyed", { orderId: "K-3" });
  assert.equal((await steps(sql, e)).approve, "started", "a kept event is delivered once");
});

db.test("a timeout fails the run or completes with the onTimeout value", async ({ sql }) => {
  await approvalFlow(sql, "ev_fail", { seconds: 3600 });
  await approvalFlow(sql, "ev_value", { seconds: 3600, onTimeout: { value: { ok: false } } });
  const failing = await start(sql, "ev_fail", { orderId: "T-1" });
  const valued = await start(sql, "ev_value", { orderId: "T-2" });
  await tickAt(sql, 3500);
  assert.equal((await steps(sql, failing)).approve, "started", "not due yet");
  await tickAt(sql, 3601);
  assert.equal(await runStatus(sql, failing), "failed");
  const [{ error_message }] =
    await sql`select error_message from pgflow.runs where run_id = ${failing}`;
  assert.match(error_message, /^\[WAIT_TIMEOUT\] step approve: no 'approved' event within 3600 s/);
  assert.deepEqual(await steps(sql, valued), { approve: "completed", notify: "started" });
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${valued} and step_slug = 'approve'`;
  assert.deepEqual(output, { ok: false });
  assert.deepEqual((await send(sql, { runId: valued })).map((d) => d.reason), ["step completed"]);
});

db.test("a sleep wakes on the tick after its time, for a duration or until a time", async ({ sql }) => {
  await defineFlow(sql, "ev_sleep", [{ slug: "nap" }, { slug: "after", deps: ["nap"] }]);
  await sql`select pgflow._set_wait('ev_sleep', 'nap', '{"kind": "sleep", "seconds": 172800}')`;
  await defineFlow(sql, "ev_until", [{ slug: "nap" }]);
  await sql`select pgflow._set_wait('ev_until', 'nap', '{"kind": "sleep", "until": "$.at"}')`;
  const slept = await start(sql, "ev_sleep", {});
  const until = await start(sql, "ev_until", { at: "2000-01-01T00:00:00Z" });
  assert.equal(await runStatus(sql, until), "completed", "a time already past wakes at once");
  const bad = await start(sql, "ev_until", { at: "tomorrow-ish" });
  assert.equal(await runStatus(sql, bad), "failed");
  await tickAt(sql, 172790);
  assert.deepEqual(await steps(sql, slept), { nap: "started", after: "created" });
  await tickAt(sql, 172801);
  assert.deepEqual(await steps(sql, slept), { nap: "completed", after: "started" });
  const [{ ok }] = await sql`select (output #>> '{}')::timestamptz = wait_until as ok
                             from pgflow.step_states where run_id = ${slept} and step_slug = 'nap'`;
  assert.ok(ok, "a sleep's output is the time it was due");
});

db.test("tokens are single use, expire and reveal nothing", async ({ sql }) => {
  await approvalFlow(sql, "ev_token");
  const runId = await start(sql, "ev_token", { orderId: "W-1" });
  const [{ token }] = await sql<{ token: string }[]>`
    select pgflow.create_wait_token(${runId}, 'approve') as token`;
  assert.match(token, /^[0-9a-f]{64}$/);
  const [{ stored }] = await sql`select count(*)::int as stored from pgflow.wait_tokens
                                 where token_hash = convert_to(${token}, 'UTF8')`;
  assert.equal(stored, 0, "only the hash is stored");
  const use = async (t: string) =>
    (await sql<{ r: Delivery }[]>`select pgflow.send_event_with_token(${t}, '"ok"') as r`)[0].r;
  assert.equal((await use("0".repeat(64))).reason, "unknown token");
  assert.equal((await use(token)).status, "delivered");
  assert.equal((await use(token)).reason, "token already used");
  const [{ expired }] = await sql<{ expired: string }[]>`
    select pgflow.create_wait_token(${runId}, 'approve', '1 second') as expired`;
  await sql`update pgflow.wait_tokens set expires_at = now() - interval '1 minute'
            where token_hash = sha256(convert_to(${expired}, 'UTF8'))`;
  assert.equal((await use(expired)).reason, "token expired");
  await assert.rejects(
    sql`select pgflow.create_wait_token(${runId}, 'notify')`,
    /run .* has no event step 'notify'/,
  );
});

db.test("bad sends name the value and the fix", async ({ sql }) => {
  await approvalFlow(sql, "ev_bad");
  const runId = await start(sql, "ev_bad", { orderId: "B-1" });
  await assert.rejects(send(sql, { runId, event: "paid" }), (e: Error) => {
    assert.match(e.message, /flow ev_bad has no event step waiting for event 'paid'/);
    assert.match((e as Error & { hint: string }).hint, /approve waits for approved/);
    return true;
  });
  await assert.rejects(send(sql, { event: "approved" }), /names neither a run nor a key/);
  await assert.rejects(
    send(sql, { key: "x", event: "bad name!" }),
    /event name 'bad name!' is not valid/,
  );
});

db.test("waits are not stuck, not uncovered, and cancel, retry and resume handle them", async ({ sql }) => {
  await approvalFlow(sql, "ev_ops", {}, true);
  const worker = await registerWorker(sql, "ev_ops");
  const runId = await start(sql, "ev_ops", { orderId: "O-1" });
  const [claimed] = await readAndStart(sql, "ev_ops", worker, [["ev_ops", "submit"]]);
  await sql`select pgflow.complete_task(${runId}, 'submit', 0, '"s"'::jsonb, ${claimed.attempt})`;
  assert.equal((await steps(sql, runId)).approve, "started");
  // Stalled recovery, long after any timeout, finds nothing to take back.
  await sql`update pgflow.step_states set started_at = now() - interval '1 day'
            where run_id = ${runId} and step_slug = 'approve'`;
  const [{ requeued }] = await sql`select pgflow.requeue_stalled_tasks() as requeued`;
  assert.equal(requeued, 0);
  const cov = await sql`select * from pgflow.queue_coverage('ev_ops')`;
  assert.ok(!cov.some((r) => r.step_slug === "approve"), "a wait needs no handler");

  // Resume after a cancel: the completed submit is reused, the wait starts again.
  await sql`select pgflow.cancel_run(${runId}, 'test')`;
  assert.equal((await steps(sql, runId)).approve, "cancelled");
  assert.deepEqual((await send(sql, { runId })).map((d) => d.reason), ["run cancelled"]);
  const [{ resumed }] = await sql`select (pgflow.resume_run(${runId})).run_id as resumed`;
  assert.equal((await steps(sql, resumed)).approve, "started");
  // The key reaches the resumed run's wait; the cancelled run's is reported, not reopened.
  const keyed = await send(sql, { key: "O-1", payload: "r" });
  assert.deepEqual(
    keyed.map((d) => [d.run_id, d.status, d.reason]).sort(),
    [[resumed, "delivered", undefined], [runId, "ignored", "run cancelled"]].sort(),
  );

  // A resumed run whose wait had completed reuses its event.
  await sql`select pgflow.cancel_run(${resumed}, 'again')`;
  const [{ again }] = await sql`select (pgflow.resume_run(${resumed})).run_id as again`;
  const st = await steps(sql, again);
  assert.equal(st.approve, "completed");
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${again} and step_slug = 'approve'`;
  assert.equal(output, "r");
  // A retry waits again from the start.
  const [{ retried }] = await sql`select (pgflow.retry_run(${runId})).run_id as retried`;
  assert.deepEqual(await steps(sql, retried), {
    submit: "started",
    approve: "created",
    notify: "created",
  });
});

db.test("only service_role may send events", async ({ sql }) => {
  await approvalFlow(sql, "ev_priv");
  const runId = await start(sql, "ev_priv", { orderId: "P-1" });
  await sql`do $$ begin
    if not exists (select 1 from pg_roles where rolname = 'authenticated') then
      create role authenticated nologin;
    end if; end $$`;
  await sql.begin(async (tx) => {
    await tx`set local role service_role`;
    const [{ r }] = await tx`select pgflow.send_event('approved', '1', run_id => ${runId}) as r`;
    assert.equal(r.results[0].status, "delivered");
  });
  await assert.rejects(
    sql.begin(async (tx) => {
      await tx`set local role authenticated`;
      await tx`select pgflow.send_event('approved', '1', run_id => ${runId})`;
    }),
    /permission denied/,
  );
});

db.test("the wait is part of the shape: compiled, verified, and a changed one is a mismatch", async ({ sql }) => {
  const make = (timeout: "3 days" | "4 days") =>
    new Flow<{ orderId: string }>({ slug: "ev_compiled" })
      .waitForEvent({ slug: "decision", event: "decided", key: "$.orderId", timeout })
      .sleep({ slug: "pause", dependsOn: ["decision"], for: "1 hour" });
  assert.equal((await compileFlow(sql, make("3 days"))).status, "compiled");
  const [stored] = await sql`select kind, wait_event, wait_key_path, wait_seconds from pgflow.steps
                             where flow_slug = 'ev_compiled' order by step_index`;
  assert.deepEqual(stored, {
    kind: "event",
    wait_event: "decided",
    wait_key_path: "$.orderId",
    wait_seconds: 259200,
  });
  assert.equal((await compileFlow(sql, make("3 days"))).status, "verified");
  const changed = await compileFlow(sql, make("4 days"));
  assert.equal(changed.status, "mismatch");
  assert.match(changed.differences.join("\n"), /step 0: wait .*259200.* stored, .*345600.* new/);
  const [{ problems }] = await sql`
    select pgflow._wait_step_problems('{"stepType": "map", "wait": {"kind": "sleep"}}', 3) as problems`;
  assert.deepEqual(problems, [
    "step 3: a waiting step cannot be a map",
    "step 3: a sleep needs exactly one of seconds and until",
  ]);
});

db.test("a keyed event sent while a wait for its key starts is delivered, not kept and lost", async ({ sql, connect }) => {
  await approvalFlow(sql, "ev_race");
  const starter = connect();
  const sender = connect();
  try {
    let runId = "";
    let sending: Promise<Delivery[]> | undefined;
    await starter.begin(async (tx) => {
      [{ run_id: runId }] = await tx<{ run_id: string }[]>`
        select run_id from pgflow.start_flow('ev_race', '{"orderId": "R-1"}')`;
      // The wait has started, uncommitted: the sender cannot see it yet.
      sending = send(sender, { key: "R-1", payload: "r" });
      const first = await Promise.race([
        sending.then(() => "returned"),
        waitFor(
          async () =>
            (await sql`select 1 from pg_locks where locktype = 'advisory' and not granted`)[0],
          {
            what: "the sender to wait for the starting wait",
          },
        ).then(() => "blocked"),
      ]);
      assert.equal(first, "blocked", "the sender returned before the wait committed");
    });
    const results = await sending!;
    assert.deepEqual(results.map((d) => [d.run_id, d.status]), [[runId, "delivered"]]);
    assert.equal((await steps(sql, runId)).approve, "completed");
  } finally {
    await starter.end();
    await sender.end();
  }
});
