/**
 * The cron evaluator of schedules (0265_cron.sql): five fields, names, ranges, steps, lists, the
 * day-of-month/day-of-week rule, time zones and daylight-saving changes, expressions that never
 * fire, and errors that name the expression, the field and the fix.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

async function next(
  sql: Sql,
  expression: string,
  after: string,
  n = 3,
  zone = "UTC",
): Promise<string[]> {
  const rows = await sql<{ t: string }[]>`
    select to_char(t at time zone 'UTC', 'YYYY-MM-DD HH24:MI') as t
    from pgflow.cron_next_times(${expression}, ${zone}, ${after}::timestamptz, ${n}) t`;
  return rows.map((r) => r.t);
}

async function previous(sql: Sql, expression: string, at: string): Promise<string> {
  const [{ t }] = await sql<{ t: string }[]>`
    select to_char(pgflow._cron_tick(pgflow._cron_parse(${expression}), 'UTC', ${at}::timestamptz,
                   false) at time zone 'UTC', 'YYYY-MM-DD HH24:MI') as t`;
  return t;
}

db.test("fields: values, ranges, steps, lists, names, macros", async ({ sql }) => {
  assert.deepEqual(await next(sql, "*/15 * * * *", "2026-03-02 10:07Z"), [
    "2026-03-02 10:15",
    "2026-03-02 10:30",
    "2026-03-02 10:45",
  ]);
  assert.deepEqual(await next(sql, "5 9-10 * * *", "2026-03-02 09:05Z"), [
    "2026-03-02 10:05",
    "2026-03-03 09:05",
    "2026-03-03 10:05",
  ]);
  // 2026-03-02 is a Monday.
  assert.deepEqual(await next(sql, "0 9 * * MON-fri", "2026-03-06 10:00Z"), [
    "2026-03-09 09:00",
    "2026-03-10 09:00",
    "2026-03-11 09:00",
  ]);
  assert.deepEqual(await next(sql, "0 0 1 jan,jul *", "2026-03-02 00:00Z", 2), [
    "2026-07-01 00:00",
    "2027-01-01 00:00",
  ]);
  assert.deepEqual(await next(sql, "10/20 * * * *", "2026-03-02 10:00Z"), [
    "2026-03-02 10:10",
    "2026-03-02 10:30",
    "2026-03-02 10:50",
  ]);
  // 7 is Sunday too; 2026-03-08 is a Sunday.
  assert.deepEqual(await next(sql, "0 12 * * 7", "2026-03-02 00:00Z", 1), ["2026-03-08 12:00"]);
  assert.deepEqual(await next(sql, "@daily", "2026-03-02 00:00Z", 1), ["2026-03-03 00:00"]);
  assert.deepEqual(await next(sql, "@hourly", "2026-03-02 00:00Z", 1), ["2026-03-02 01:00"]);
  // Month ends and leap days.
  assert.deepEqual(await next(sql, "0 0 31 * *", "2026-01-31 00:00Z", 2), [
    "2026-03-31 00:00",
    "2026-05-31 00:00",
  ]);
  assert.deepEqual(await next(sql, "0 0 29 2 *", "2026-01-01 00:00Z", 1), ["2028-02-29 00:00"]);
});

db.test("day-of-month and day-of-week: either when both are restricted", async ({ sql }) => {
  // The 13th, or any Friday (2026-03-06, 2026-03-13 is both, 2026-03-20).
  assert.deepEqual(await next(sql, "0 0 13 * 5", "2026-03-01 00:00Z", 3), [
    "2026-03-06 00:00",
    "2026-03-13 00:00",
    "2026-03-20 00:00",
  ]);
  // Only the 13th when the weekday is '*'.
  assert.deepEqual(await next(sql, "0 0 13 * *", "2026-03-01 00:00Z", 1), ["2026-03-13 00:00"]);
});

db.test("previous tick: the latest at or before a time", async ({ sql }) => {
  assert.equal(await previous(sql, "*/15 * * * *", "2026-03-02 10:29:59Z"), "2026-03-02 10:15");
  assert.equal(await previous(sql, "*/15 * * * *", "2026-03-02 10:30Z"), "2026-03-02 10:30");
  assert.equal(await previous(sql, "0 9 * * mon-fri", "2026-03-09 08:00Z"), "2026-03-06 09:00");
  assert.equal(await previous(sql, "0 0 1 * *", "2026-03-01 00:00Z"), "2026-03-01 00:00");
  assert.equal(await previous(sql, "0 0 29 2 *", "2027-06-01 00:00Z"), "2024-02-29 00:00");
});

db.test("time zones: the wall clock of the zone, daylight-saving changes fire once", async ({ sql }) => {
  // 09:00 in Paris is 08:00 UTC in winter and 07:00 UTC in summer (change on 2026-03-29).
  assert.deepEqual(await next(sql, "0 9 * * *", "2026-03-27 12:00Z", 3, "Europe/Paris"), [
    "2026-03-28 08:00",
    "2026-03-29 07:00",
    "2026-03-30 07:00",
  ]);
  // 02:30 does not exist in Paris on 2026-03-29: it fires when 02:30 would have been (03:30 CEST,
  // 01:30 UTC), once.
  assert.deepEqual(await next(sql, "30 2 * * *", "2026-03-28 12:00Z", 3, "Europe/Paris"), [
    "2026-03-29 01:30",
    "2026-03-30 00:30",
    "2026-03-31 00:30",
  ]);
  // 02:30 occurs twice on 2026-10-25: one tick, never two.
  assert.deepEqual(await next(sql, "30 2 * * *", "2026-10-24 12:00Z", 2, "Europe/Paris"), [
    "2026-10-25 01:30",
    "2026-10-26 01:30",
  ]);
  // Every 30 minutes across the autumn change: strictly increasing, no instant twice.
  const ticks = await next(sql, "*/30 * * * *", "2026-10-24 23:00Z", 12, "Europe/Paris");
  assert.deepEqual([...ticks].sort(), ticks);
  assert.equal(new Set(ticks).size, ticks.length);
});

db.test("bad expressions and time zones fail naming the value and the fix", async ({ sql }) => {
  const fails = async (expression: string, zone: string, message: RegExp, hint: RegExp) => {
    await assert.rejects(
      () => sql`select * from pgflow.cron_next_times(${expression}, ${zone})`,
      (e: { code?: string; message: string; hint?: string }) => {
        assert.equal(e.code, "22023", e.message);
        assert.match(e.message, message);
        assert.match(e.hint ?? "", hint);
        return true;
      },
    );
  };
  await fails(
    "* * * *",
    "UTC",
    /^cron expression '\* \* \* \*' has 4 fields, not 5$/,
    /five fields/,
  );
  await fails("*/1 * * * * *", "UTC", /has 6 fields, not 5/, /every => '1 second'/);
  await fails("", "UTC", /has 0 fields/, /five fields/);
  await fails("60 * * * *", "UTC", /minute field value '60' is out of range/, /0 to 59/);
  await fails("0 0 * 13 *", "UTC", /month field value '13' is out of range/, /jan, feb/);
  await fails("0 0 * * funday", "UTC", /day-of-week field value 'funday'/, /sun, mon/);
  await fails("0 5-1 * * *", "UTC", /hour field range '5-1' runs backwards/, /1-5/);
  await fails("*/0 * * * *", "UTC", /has step 0/, /1 or more/);
  await fails("0 0 ? * *", "UTC", /day-of-month field item '\?' is not a value/, /1 to 31/);
  await fails("0 9 * * *", "Mars/Olympus", /time zone 'Mars\/Olympus' is not known/, /IANA/);
  await fails("0 9 * * *", "+02", /time zone '\+02' is not known/, /pg_timezone_names/);
});
