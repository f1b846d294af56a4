/**
 * Schedules (0270_schedules.sql): create, update, pause, resume, delete and list with actionable
 * errors; exactly one run per tick with concurrent tickers, a retried tick and a clock step; missed
 * ticks after an outage by the catch-up policy; a tick whose run cannot start; service_role's
 * rights. Time is faked through fire_due_schedules' `now` argument, relative to the real clock
 * (a schedule's first tick is the first after its creation).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Schedule {
  schedule: string;
  flow: string;
  cron: string | null;
  every_seconds: number | null;
  time_zone: string;
  input: unknown;
  tick_key: string | null;
  catch_up: number;
  paused: boolean;
  next_tick_at: string | null;
  last_tick_at: string | null;
  last_run_id: string | null;
  last_error: string | null;
  skipped_ticks: number;
}

async function schedule(sql: Sql, name: string): Promise<Schedule> {
  const [row] = await sql<{ s: Schedule }[]>`
    select s from pgflow.list_schedules() s where s ->> 'schedule' = ${name}`;
  return row.s;
}

/** The schedule's next tick, plus an offset in seconds, as an ISO text Postgres reads back. */
async function tickPlus(sql: Sql, name: string, seconds: number): Promise<string> {
  const [{ t }] = await sql<{ t: string }[]>`
    select to_char((next_tick_at + make_interval(secs => ${seconds})) at time zone 'UTC',
                   'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as t
    from pgflow.schedules where schedule_name = ${name}`;
  return t;
}

async function fire(sql: Sql, now: string): Promise<number> {
  const [{ n }] = await sql<{ n: number }[]>`select pgflow.fire_due_schedules(${now}) as n`;
  return n;
}

/** Runs started by a schedule, as (tick time, run input) in tick order. */
async function runsOf(sql: Sql, name: string): Promise<{ tick: string; input: unknown }[]> {
  return await sql<{ tick: string; input: unknown }[]>`
    select to_char(k.tick_at at time zone 'UTC', 'HH24:MI:SS') as tick, r.input
    from pgflow.schedule_ticks k join pgflow.runs r on r.run_id = k.run_id
    where k.schedule_name = ${name} order by k.tick_at`;
}

async function flow(sql: Sql, slug: string): Promise<void> {
  await defineFlow(sql, slug, [{ slug: "a" }]);
}

db.test("create, update, pause, resume, delete, list", async ({ sql }) => {
  await flow(sql, "sc_report");
  const [{ s: created }] = await sql<{ s: Schedule }[]>`
    select pgflow.create_schedule('sc_nightly', 'sc_report', cron => '0 2 * * *',
      time_zone => 'Europe/Paris', input => '{"full": true}') as s`;
  assert.equal(created.schedule, "sc_nightly");
  assert.deepEqual([created.cron, created.time_zone, created.catch_up], [
    "0 2 * * *",
    "Europe/Paris",
    1,
  ]);
  assert.deepEqual(created.input, { full: true });
  // The first tick is the next 02:00 in Paris.
  const [{ ok }] = await sql`
    select ${created.next_tick_at}::timestamptz > now()
       and (${created.next_tick_at}::timestamptz at time zone 'Europe/Paris')::time = '02:00' as ok`;
  assert.ok(ok, created.next_tick_at ?? "no next tick");

  const [{ s: updated }] = await sql<{ s: Schedule }[]>`
    select pgflow.update_schedule('sc_nightly', every => '30 seconds', tick_key => 'at',
                                  catch_up => 5) as s`;
  assert.deepEqual(
    [updated.cron, updated.every_seconds, updated.tick_key, updated.catch_up],
    [null, 30, "at", 5],
  );
  assert.deepEqual(updated.input, { full: true }, "a part not given is kept");
  const [{ s: back }] = await sql<{ s: Schedule }[]>`
    select pgflow.update_schedule('sc_nightly', cron => '*/5 * * * *', tick_key => '') as s`;
  assert.deepEqual([back.cron, back.every_seconds, back.tick_key], ["*/5 * * * *", null, null]);

  const [{ s: paused }] = await sql<
    { s: Schedule }[]
  >`select pgflow.pause_schedule('sc_nightly') as s`;
  assert.deepEqual([paused.paused, paused.next_tick_at], [true, null]);
  assert.equal(await fire(sql, await tickPlus(sql, "sc_nightly", 3600)), 0, "paused: no run");
  const [{ s: resumed }] = await sql<
    { s: Schedule }[]
  >`select pgflow.resume_schedule('sc_nightly') as s`;
  assert.equal(resumed.paused, false);
  assert.ok(resumed.next_tick_at !== null);

  assert.deepEqual(
    (await sql`select s ->> 'schedule' as name from pgflow.list_schedules() s`).map((r) => r.name),
    ["sc_nightly"],
  );
  const [{ deleted }] = await sql`select pgflow.delete_schedule('sc_nightly') as deleted`;
  assert.equal(deleted, true);
  const [{ again }] = await sql`select pgflow.delete_schedule('sc_nightly') as again`;
  assert.equal(again, false);
  await assert.rejects(
    () => sql`select pgflow.pause_schedule('sc_nightly')`,
    (e: { code?: string; message: string }) =>
      e.code === "P0002" && e.message === "schedule 'sc_nightly' does not exist",
  );
}, { fresh: true });

db.test("bad definitions fail naming the value and the fix", async ({ sql }) => {
  await flow(sql, "sc_bad");
  const fails = async (
    call: () => Promise<unknown>,
    code: string,
    message: RegExp,
    hint: RegExp,
  ) => {
    await assert.rejects(call, (e: { code?: string; message: string; hint?: string }) => {
      assert.equal(e.code, code, e.message);
      assert.match(e.message, message);
      assert.match(e.hint ?? "", hint);
      return true;
    });
  };
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', cron => '61 * * * *')`,
    "22023",
    /^cron expression '61 \* \* \* \*': minute field value '61' is out of range$/,
    /0 to 59/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', cron => '0 0 30 2 *')`,
    "22023",
    /cron expression '0 0 30 2 \*' never fires/,
    /30 February/,
  );
  await fails(
    () =>
      sql`select pgflow.create_schedule('sc_x', 'sc_bad', cron => '0 9 * * *', time_zone => 'CEST')`,
    "22023",
    /time zone 'CEST' is not known/,
    /Europe\/Paris/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_nope', cron => '0 9 * * *')`,
    "22023",
    /schedule sc_x: flow or alias 'sc_nope' does not exist/,
    /compile the flow first/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad')`,
    "22023",
    /give exactly one of cron and every/,
    /every => '10 seconds'/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1.5 seconds')`,
    "22023",
    /every 00:00:01\.5 is not a whole number of seconds/,
    /use cron/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1 month')`,
    "22023",
    /every 1 mon is not a whole number of seconds/,
    /use cron/,
  );
  await fails(
    () =>
      sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1 minute', input => '[1]',
                                        tick_key => 'at')`,
    "22023",
    /tick_key 'at' needs a non-empty key and an input that is a JSON object, not array/,
    /object input/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1 minute', catch_up => 0)`,
    "22023",
    /catch_up 0 is not from 1 to 1000/,
    /the N latest/,
  );
  await fails(
    () => sql`select pgflow.create_schedule('bad name', 'sc_bad', every => '1 minute')`,
    "22023",
    /schedule name 'bad name' is not valid/,
    /letters, digits/,
  );
  await sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1 minute')`;
  await fails(
    () => sql`select pgflow.create_schedule('sc_x', 'sc_bad', every => '1 minute')`,
    "23505",
    /schedule sc_x already exists/,
    /update_schedule/,
  );
  await fails(
    () => sql`select pgflow.update_schedule('sc_x', cron => '* * * * *', every => '1 minute')`,
    "22023",
    /give cron or every, not both/,
    /replaces/,
  );
}, { fresh: true });

db.test(
  "one run per tick: the tick's time in the input, a retried tick, a clock step",
  async ({ sql }) => {
    await flow(sql, "sc_once");
    await sql`select pgflow.create_schedule('sc_once', 'sc_once', cron => '* * * * *',
                                          input => '{"k": 1}', tick_key => 'tick')`;
    const t0 = await tickPlus(sql, "sc_once", 1);
    assert.equal(await fire(sql, await tickPlus(sql, "sc_once", -1)), 0, "not due yet");
    assert.equal(await fire(sql, t0), 1);
    const [first] = await runsOf(sql, "sc_once");
    const [{ due }] = await sql`
    select to_char(tick_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as due
    from pgflow.schedule_ticks where schedule_name = 'sc_once'`;
    assert.deepEqual(first.input, { k: 1, tick: due }, "the input, plus the tick's time in UTC");
    // A ticker retrying the same call, or a clock stepped back a minute: nothing new.
    assert.equal(await fire(sql, t0), 0);
    const [{ back }] = await sql`select (${t0}::timestamptz - interval '70 seconds')::text as back`;
    assert.equal(await fire(sql, back), 0);
    // A tick whose transaction rolled back was not fired: the retry fires it, once.
    const next = await tickPlus(sql, "sc_once", 0.5);
    await sql.begin(async (tx) => {
      assert.equal(await fire(tx, next), 1);
      throw new Error("rolled back");
    }).catch((e: Error) => assert.equal(e.message, "rolled back"));
    assert.equal((await runsOf(sql, "sc_once")).length, 1);
    assert.equal(await fire(sql, next), 1);
    assert.equal(await fire(sql, next), 0);
    // A schedule row set back (a restored backup, a hand edit): the tick's key still refuses it.
    await sql`update pgflow.schedules set next_tick_at = next_tick_at - interval '1 minute'
            where schedule_name = 'sc_once'`;
    assert.equal(await fire(sql, next), 0, "the (schedule, tick) key holds");
    assert.equal((await runsOf(sql, "sc_once")).length, 2);
  },
  { fresh: true },
);

db.test("concurrent tickers start one run per tick", async ({ sql, connect }) => {
  await flow(sql, "sc_race");
  await sql`select pgflow.create_schedule('sc_race', 'sc_race', every => '1 second', catch_up => 1000)`;
  const start = await tickPlus(sql, "sc_race", 0);
  const tickers = Array.from({ length: 8 }, () => connect());
  // 30 ticks, each fired by all eight at once, each ticker holding its transaction open a little
  // so the others meet its locks and its uncommitted tick rows.
  for (let i = 0; i < 30; i++) {
    const [{ now }] =
      await sql`select (${start}::timestamptz + make_interval(secs => ${i}))::text as now`;
    await Promise.all(tickers.map((ticker, k) =>
      ticker.begin(async (tx) => {
        await tx`select pgflow.fire_due_schedules(${now})`;
        if (k % 2 === 0) await tx`select pg_sleep(0.005)`;
      })
    ));
  }
  // Then all at once with clocks a few seconds apart (a clock step between tickers).
  await Promise.all(
    tickers.map((ticker, k) =>
      ticker`select pgflow.fire_due_schedules(${start}::timestamptz + make_interval(secs => ${
        35 - (k % 4)
      }))`
    ),
  );
  // A ticker that found the row locked by one with an earlier clock skipped it: the ticks past
  // that clock are the next pass's.
  await sql`select pgflow.fire_due_schedules(${start}::timestamptz + interval '35 seconds')`;
  const runs = await runsOf(sql, "sc_race");
  assert.equal(runs.length, 36, "ticks 0..35: one run each");
  assert.equal(new Set(runs.map((r) => r.tick)).size, 36);
  const [{ count }] =
    await sql`select count(*)::int as count from pgflow.runs where flow_slug = 'sc_race'`;
  assert.equal(count, 36, "no run without its tick");
}, { fresh: true });

db.test(
  "missed ticks: the latest only by default, up to catch_up, on-time ticks always",
  async ({ sql }) => {
    await flow(sql, "sc_missed");
    await sql`select pgflow.create_schedule('sc_latest', 'sc_missed', cron => '* * * * *')`;
    await sql`select pgflow.create_schedule('sc_three', 'sc_missed', cron => '* * * * *', catch_up => 3)`;
    // Nobody ticks for five minutes and a bit: ticks at +0, +1, … +5 minutes are due.
    const after = await tickPlus(sql, "sc_latest", 5 * 60 + 20);
    assert.equal(await fire(sql, after), 1 + 3);
    const latest = await schedule(sql, "sc_latest");
    assert.equal((await runsOf(sql, "sc_latest")).length, 1);
    assert.equal(latest.skipped_ticks, 5);
    const three = await schedule(sql, "sc_three");
    assert.equal((await runsOf(sql, "sc_three")).length, 3);
    assert.equal(three.skipped_ticks, 3);
    const [{ gap }] = await sql`
    select extract(epoch from max(tick_at) - min(tick_at))::int as gap
    from pgflow.schedule_ticks where schedule_name = 'sc_three'`;
    assert.equal(gap, 120, "the three latest ticks");
    assert.equal(latest.last_tick_at, three.last_tick_at);

    // Every second: a ticker 5 s late is not an outage (all fire); after 60 s only the last ten
    // seconds' ticks (less than 10 s late) fire with catch_up 1.
    await sql`select pgflow.create_schedule('sc_fast', 'sc_missed', every => '1 second')`;
    assert.equal(await fire(sql, await tickPlus(sql, "sc_fast", 4)), 5);
    const resume = await tickPlus(sql, "sc_fast", 59.5);
    assert.equal(await fire(sql, resume), 10);
    const fast = await schedule(sql, "sc_fast");
    assert.equal(fast.skipped_ticks, 50);
    assert.equal((await runsOf(sql, "sc_fast")).length, 15);
    // A tick records the clock it was fired by, so its recorded lateness is the one the decision
    // used: every tick of the resumed pass less than 10 s late, however long its starts took.
    const lateness = await sql<{ fired_by: boolean; late: number }[]>`
      select fired_at = ${resume}::timestamptz as fired_by,
             extract(epoch from fired_at - tick_at)::float8 as late
      from pgflow.schedule_ticks
      where schedule_name = 'sc_fast' and tick_at > ${resume}::timestamptz - interval '10 s'`;
    assert.equal(lateness.length, 10);
    assert.ok(lateness.every((t) => t.fired_by && t.late < 10), JSON.stringify(lateness));
  },
  { fresh: true },
);

db.test(
  "a tick whose run cannot start is spent with its error; other schedules still fire",
  async ({ sql }) => {
    await flow(sql, "sc_gone");
    await flow(sql, "sc_fine");
    await sql`select pgflow.create_schedule('sc_a_gone', 'sc_gone', every => '1 minute')`;
    await sql`select pgflow.create_schedule('sc_b_fine', 'sc_fine', every => '1 minute')`;
    await sql`select pgflow.delete_flow_and_data('sc_gone')`;
    // Both schedules' ticks are due (created on either side of a minute's edge, they differ).
    const due =
      [await tickPlus(sql, "sc_a_gone", 1), await tickPlus(sql, "sc_b_fine", 1)].sort()[1];
    assert.equal(await fire(sql, due), 1);
    const gone = await schedule(sql, "sc_a_gone");
    assert.match(gone.last_error ?? "", /^tick .+: flow 'sc_gone' does not exist$/);
    const [tick] =
      await sql`select run_id, error from pgflow.schedule_ticks where schedule_name = 'sc_a_gone'`;
    assert.deepEqual([tick.run_id, tick.error], [null, "flow 'sc_gone' does not exist"]);
    assert.equal((await runsOf(sql, "sc_b_fine")).length, 1);
    assert.equal((await schedule(sql, "sc_b_fine")).last_error, null);
  },
  { fresh: true },
);

db.test("a schedule on an alias starts the alias's target", async ({ sql }) => {
  await defineFlow(sql, "sc_alias_v1", [{ slug: "a" }]);
  await sql`insert into pgflow.aliases (alias, flow_slug) values ('sc_alias', 'sc_alias_v1')`;
  await sql`update pgflow.flows set alias = 'sc_alias' where flow_slug = 'sc_alias_v1'`;
  await sql`select pgflow.create_schedule('sc_on_alias', 'sc_alias', every => '1 minute')`;
  await fire(sql, await tickPlus(sql, "sc_on_alias", 1));
  const [run] = await sql`
    select r.flow_slug, r.started_as from pgflow.runs r
    join pgflow.schedule_ticks k on k.run_id = r.run_id where k.schedule_name = 'sc_on_alias'`;
  assert.deepEqual([run.flow_slug, run.started_as], ["sc_alias_v1", "sc_alias"]);
}, { fresh: true });

db.test("service_role manages and lists schedules but does not fire them", async ({ sql }) => {
  await flow(sql, "sc_priv");
  await sql.begin(async (tx) => {
    await tx`set local role service_role`;
    await tx`select pgflow.create_schedule('sc_priv', 'sc_priv', every => '1 hour')`;
    await tx`select pgflow.pause_schedule('sc_priv')`;
    await tx`select pgflow.resume_schedule('sc_priv')`;
    await tx`select pgflow.update_schedule('sc_priv', catch_up => 2)`;
    const rows = await tx`select * from pgflow.list_schedules()`;
    assert.equal(rows.length, 1);
    await tx`select * from pgflow.cron_next_times('0 9 * * *')`;
    await tx`select pgflow.delete_schedule('sc_priv')`;
  });
  await assert.rejects(
    sql.begin(async (tx) => {
      await tx`set local role service_role`;
      await tx`select pgflow.fire_due_schedules()`;
    }),
    /permission denied for function fire_due_schedules/,
  );
}, { fresh: true });

db.test("pgflow.tick() fires due ticks too (flow control's periodic pass)", async ({ sql }) => {
  await flow(sql, "sc_tick");
  await sql`select pgflow.create_schedule('sc_tick', 'sc_tick', every => '1 second')`;
  // Wait (in the database) until the first tick's time has passed.
  await sql`select pg_sleep(greatest(0, extract(epoch from next_tick_at - clock_timestamp())) + 0.05)
            from pgflow.schedules`;
  await sql`select pgflow.tick()`;
  assert.ok((await runsOf(sql, "sc_tick")).length >= 1);
}, { fresh: true });
