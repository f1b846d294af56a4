/**
 * `since` (`client.listRuns({ since })` and `pgflow runs … --since`) has one parser: impossible
 * dates and times are refused rather than rolled over (`2026-02-31` is not March 3rd), and a time
 * outside the years 0001–9999 (`--since 999999d`) is refused naming the value and the range
 * instead of failing in the database. No database is reached: the checks run before a query.
 */
import assert from "node:assert/strict";
import { ClientConfigError, createClient } from "../../mod.ts";
import { parseIsoTime } from "../../src/client/since.ts";
import { parseSince } from "../../src/cli/runs/parse.ts";
import { UsageError } from "../../src/cli/output.ts";

/** Never connected to: listRuns refuses its options before a query. */
const URL_ = "postgres://postgres:pw@127.0.0.1:1/postgres";
const NOW = new Date("2026-06-15T12:00:00Z");

const GOOD: readonly (readonly [string, string])[] = [
  ["2026-12-01", "2026-12-01T00:00:00.000Z"],
  ["2026-12-01T08:00", "2026-12-01T08:00:00.000Z"],
  ["2026-12-01T08:00:00Z", "2026-12-01T08:00:00.000Z"],
  ["2026-12-01 08:00:00.123456+02", "2026-12-01T06:00:00.123Z"],
  ["2026-12-01T08:00:00.5-0130", "2026-12-01T09:30:00.500Z"],
  ["2024-02-29", "2024-02-29T00:00:00.000Z"],
  ["2000-02-29T23:59:59Z", "2000-02-29T23:59:59.000Z"],
  ["0001-01-01", "0001-01-01T00:00:00.000Z"],
  ["0099-07-04", "0099-07-04T00:00:00.000Z"],
  ["9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"],
];

const BAD: readonly (readonly [string, RegExp])[] = [
  ["2026-02-31", /is not a date: February 2026 has 28 days/],
  ["2025-02-29", /is not a date: February 2025 has 28 days/],
  ["2100-02-29", /February 2100 has 28 days/],
  ["2026-04-31T10:00:00Z", /April 2026 has 30 days/],
  ["2026-00-10", /there is no month 00/],
  ["2026-13-01", /there is no month 13/],
  ["2026-01-00", /January 2026 has 31 days/],
  ["2026-01-01T24:00", /is not a time: hours go to 23/],
  ["2026-01-01T10:60", /minutes and seconds to 59/],
  ["2026-01-01T10:00:61Z", /minutes and seconds to 59/],
  ["2026-01-01T10:00+24:00", /the zone \+24:00 is beyond/],
  ["0000-12-31", /is out of range: times from 0001-01-01T00:00:00Z to 9999-12-31/],
  ["0001-01-01T00:30+01:00", /is out of range/],
  ["9999-12-31T23:00-02:00", /is out of range/],
  ["2026-1-1", /is not an ISO time/],
  ["2026-01-01Z", /is not an ISO time/],
];

Deno.test("parseIsoTime: calendar dates and times with zones; impossible ones are refused, saying why", () => {
  for (const [text, iso] of GOOD) {
    const parsed = parseIsoTime(text);
    assert.ok(parsed.ok, `${text}: ${JSON.stringify(parsed)}`);
    assert.equal(parsed.time.toISOString(), iso, text);
  }
  for (const [text, problem] of BAD) {
    const parsed = parseIsoTime(text);
    assert.ok(!parsed.ok, `${text} should be refused`);
    assert.match(parsed.problem, problem, text);
  }
});

Deno.test("listRuns and --since refuse the same impossible times, naming the value and the fix", async () => {
  const client = createClient({ connectionString: URL_ });
  try {
    for (const [text, problem] of BAD) {
      await assert.rejects(
        client.listRuns({ since: text }),
        (e: unknown) =>
          e instanceof ClientConfigError &&
          e.message.startsWith(`listRuns: since ${JSON.stringify(text)} `) &&
          problem.test(e.message) && /pass a Date or an ISO time/.test(e.message),
        text,
      );
      assert.throws(
        () => parseSince(text, NOW),
        (e: unknown) =>
          e instanceof UsageError && e.message.startsWith(`--since ${JSON.stringify(text)} `) &&
          problem.test(e.message) && /pass how long ago/.test(e.message),
        text,
      );
    }
    for (const [text, iso] of GOOD) assert.equal(parseSince(text, NOW).toISOString(), iso);
    for (
      const [date, shown] of [
        [new Date(-8.64e15), "Date -271821-04-20T00:00:00.000Z is out of range"],
        [new Date(8.64e15), "Date +275760-09-13T00:00:00.000Z is out of range"],
        [new Date("nope"), "Invalid Date is not a time"],
      ] as const
    ) {
      await assert.rejects(
        client.listRuns({ since: date }),
        (e: unknown) =>
          e instanceof ClientConfigError && e.message.startsWith(`listRuns: since ${shown}`),
        shown,
      );
    }
    await assert.rejects(
      client.listRuns({ since: 5 as unknown as string }),
      /listRuns: since 5 is neither a Date nor a string/,
    );
  } finally {
    await client.close();
  }
});

Deno.test("--since: a duration reaching before the year 1 is a usage error naming the longest one", () => {
  assert.equal(parseSince("90s", NOW).toISOString(), "2026-06-15T11:58:30.000Z");
  assert.equal(parseSince("2w", NOW).toISOString(), "2026-06-01T12:00:00.000Z");
  // The longest duration in days from NOW: back to 0001-01-01T00:00Z and no further.
  const most = Math.floor((NOW.getTime() - Date.parse("0001-01-01T00:00:00Z")) / 86_400_000);
  assert.equal(parseSince(`${most}d`, NOW).getUTCFullYear(), 1);
  for (const [value, unit] of [["999999d", "d"], ["999999w", "w"], [`${most + 1}d`, "d"]]) {
    assert.throws(
      () => parseSince(value, NOW),
      (e: unknown) =>
        e instanceof UsageError &&
        e.message.startsWith(`--since "${value}" reaches back before the year 1; times from `) &&
        e.message.includes(`at most ${unit === "d" ? most : Math.floor(most / 7)}${unit} ago`),
      value,
    );
  }
  assert.throws(() => parseSince("yesterday", NOW), /"yesterday" is neither a duration nor a time/);
});
