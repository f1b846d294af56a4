/**
 * A notification is sent only while a session waits for its channel (pgflow.listen_start), so a
 * completion under load commits without a NOTIFY (Postgres serialises every notifying commit of
 * the server). The barrier (pgflow.listen_barrier) makes it safe: a sender that looked before a
 * waiter's row was visible has committed by the time the barrier passes. A sender that cannot
 * take its shared lock notifies anyway, and never waits for it.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { allNotified, defineFlow, waitForNotifications } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function hear(conn: postgres.Sql, channel: string): Promise<string[]> {
  const heard: string[] = [];
  await conn.listen(channel, (payload) => heard.push(payload));
  return heard;
}

db.test("a queue's work and a run's changes are notified only while a session waits for them", async ({ sql, connect }) => {
  await defineFlow(sql, "ln_flow", [{ slug: "a", queue: "ln_q" }], { mode: "routed" });
  const listener = connect();
  const queueHeard = await hear(listener, "pgflow_queue:ln_q");

  // LISTEN alone: nobody said they wait, nothing is sent.
  const [quiet] = await sql`select run_id from pgflow.start_flow('ln_flow', '{}')`;
  const runHeard = await hear(listener, `pgflow_run:${quiet.run_id}`);
  await sql`select pgflow.cancel_run(${quiet.run_id})`;
  await allNotified(listener, sql);
  assert.deepEqual([queueHeard, runHeard], [[], []]);

  await waitForNotifications(listener, ["pgflow_queue:ln_q"]);
  const [loud] = await sql`select run_id from pgflow.start_flow('ln_flow', '{}')`;
  await allNotified(listener, sql);
  assert.deepEqual(queueHeard, [""], "the queue's waiter is told");
  const loudHeard = await hear(listener, `pgflow_run:${loud.run_id}`);
  await waitForNotifications(listener, [`pgflow_run:${loud.run_id}`]);
  await sql`select pgflow.cancel_run(${loud.run_id})`;
  await allNotified(listener, sql);
  assert.deepEqual(loudHeard, [loud.run_id], "the run's waiter is told");

  await listener`select pgflow.listen_stop(${["pgflow_queue:ln_q"]}::text[])`;
  await sql`select pgflow.start_flow('ln_flow', '{}')`;
  await allNotified(listener, sql);
  assert.deepEqual(queueHeard, [""], "after listen_stop nothing more");
  assert.deepEqual(
    await sql`select channel from pgflow.listeners order by channel`.then((r) =>
      r.map((x) => x.channel)
    ),
    [`pgflow_run:${loud.run_id}`],
  );
});

db.test("the barrier waits out a sender that looked before the waiter said so: a read after it sees that sender's work", async ({ sql, connect }) => {
  await defineFlow(sql, "ln_race", [{ slug: "a", queue: "ln_race_q" }], { mode: "routed" });
  const listener = connect();
  const heard = await hear(listener, "pgflow_queue:ln_race_q");
  const channels = ["pgflow_queue:ln_race_q"];

  // The sender sends (and looks: nobody waits) and is still committing.
  const sender = await sql.reserve();
  try {
    await sender`begin`;
    await sender`select pgflow.start_flow('ln_race', '{}')`;
    await listener`select pgflow.listen_start(${channels}::text[])`;
    const [early] = await listener`select pgflow.listen_barrier(${channels}::text[]) as passed`;
    assert.equal(early.passed, false, "the open sender holds the barrier back");
    await sender`commit`;
  } finally {
    sender.release();
  }
  await allNotified(listener, sql);
  assert.deepEqual(heard, [], "the sender looked too early: it sent nothing");
  const [late] = await listener`select pgflow.listen_barrier(${channels}::text[]) as passed`;
  assert.equal(late.passed, true);
  const [{ n }] = await listener`select count(*)::int as n from pgflow.step_tasks
                                 where flow_slug = 'ln_race' and status = 'queued'`;
  assert.equal(n, 1, "so a read after the barrier finds the work no notification announced");

  // A sender that starts after the waiter said so is heard.
  await sql`select pgflow.start_flow('ln_race', '{}')`;
  await allNotified(listener, sql);
  assert.deepEqual(heard, [""]);
});

db.test("a sender that cannot take its shared lock notifies anyway, and does not wait for it", async ({ sql, connect }) => {
  await defineFlow(sql, "ln_held", [{ slug: "a", queue: "ln_held_q" }], { mode: "routed" });
  const listener = connect();
  const heard = await hear(listener, "pgflow_queue:ln_held_q");
  const holder = await sql.reserve();
  try {
    const [{ bucket }] =
      await sql`select pgflow._listen_bucket('pgflow_queue:ln_held_q') as bucket`;
    await holder`select pg_advisory_lock(pgflow._listen_lock_class(), ${bucket})`;
    await sql.begin(async (tx) => {
      await tx`set local lock_timeout = '2s'`;
      await tx`select pgflow.start_flow('ln_held', '{}')`;
    });
    await allNotified(listener, sql);
    assert.deepEqual(heard, [""], "announced although nobody said they wait");
  } finally {
    await holder`select pg_advisory_unlock_all()`;
    holder.release();
  }
});

db.test("channels are checked; rows of ended sessions go with the next listen_start", async ({ sql, connect }) => {
  for (const bad of [["pgflow_queue:"], ["other"], [`pgflow_run:${"x".repeat(60)}`]]) {
    await assert.rejects(
      sql`select pgflow.listen_start(${bad}::text[])`,
      (e: Error & { code?: string }) =>
        e.code === "22023" && e.message.includes(bad[0]) &&
        /not a pgflow notification channel/.test(e.message),
    );
  }
  await assert.rejects(
    sql`select pgflow.listen_barrier(null)`,
    /not a pgflow notification channel: NULL/,
  );

  const gone = connect();
  await waitForNotifications(gone, ["pgflow_queue:ln_gone"]);
  const [{ pid }] =
    await sql`select pid from pgflow.listeners where channel = 'pgflow_queue:ln_gone'`;
  await sql`select pg_terminate_backend(${pid})`;
  // Ended: gone from the server's activity, which is what the sweep compares with.
  await waitFor(
    async () => (await sql`select 1 from pg_stat_get_activity(${pid}::int)`).length === 0,
    { what: `backend ${pid} to end`, timeoutMs: 60_000 },
  );
  assert.equal((await sql`select 1 from pgflow.listeners where pid = ${pid}`).length, 1);
  // A session's first listen_start sweeps (later ones of the same session do not).
  await waitForNotifications(connect(), ["pgflow_queue:ln_other"]);
  assert.equal(
    (await sql`select 1 from pgflow.listeners where pid = ${pid}`).length,
    0,
    "the ended session's row is removed",
  );
  await gone.end().catch(() => {});
});

db.test("a transaction that starts thousands of runs holds at most 256 of pgflow's advisory locks", async ({ sql }) => {
  await defineFlow(sql, "ln_many", [{ slug: "a", queue: "ln_many_q" }], { mode: "routed" });
  const held = await sql.begin(async (tx) => {
    await tx`select pgflow.start_flow('ln_many', '{}') from generate_series(1, 3000)`;
    const [{ n }] = await tx`select count(*)::int as n from pg_locks
                             where locktype = 'advisory' and classid = pgflow._listen_lock_class()::oid
                               and pid = pg_backend_pid()`;
    return n;
  });
  assert.ok(held > 100 && held <= 256, `held ${held}`);
});

db.test("privileges: service_role may say it waits for runs, but not read who waits", async ({ sql }) => {
  const as = (query: string) =>
    sql.begin(async (tx) => {
      await tx.unsafe("set local role service_role");
      return await tx.unsafe(query);
    });
  const channel = `pgflow_run:${crypto.randomUUID()}`;
  await as(`select pgflow.listen_start(array['${channel}'])`);
  const [barrier] = await as(`select pgflow.listen_barrier(array['${channel}']) as passed`);
  assert.equal(barrier.passed, true);
  await as(`select pgflow.listen_stop(array['${channel}'])`);
  await assert.rejects(as("select * from pgflow.listeners"), /permission denied/);
  await assert.rejects(as(`select pgflow._announce('${channel}', '')`), /permission denied/);
});
