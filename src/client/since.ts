/**
 * The time a run listing starts from, as `client.listRuns({ since })` and `pgflow runs … --since`
 * take it: one parser for both. It is strict where `Date.parse` is lenient (`2026-02-31` is no
 * date, not March 3rd) and keeps to the years a `timestamptz` written as an ISO time can hold here
 * (0001 to 9999), so a bad value is refused naming itself instead of failing in the database.
 *
 * @module
 */

/** The earliest time accepted: 0001-01-01T00:00:00Z. */
export const EARLIEST_SINCE_MS: number = Date.parse("0001-01-01T00:00:00.000Z");

/** The latest time accepted: 9999-12-31T23:59:59.999Z. */
export const LATEST_SINCE_MS: number = Date.parse("9999-12-31T23:59:59.999Z");

/** The accepted range, as error messages state it. */
export const SINCE_RANGE = "from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z";

/** What {@link parseIsoTime} found: the time, or what is wrong with the text (to follow it). */
export type TimeParse =
  | { readonly ok: true; readonly time: Date }
  | { readonly ok: false; readonly problem: string };

// Date, then optionally a time, then optionally a zone (Z, ±HH, ±HHMM or ±HH:MM, as psql prints).
const ISO =
  /^(\d{4})-(\d{2})-(\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,9}))?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/;

const MONTHS = [
  "January",
  "February",
  "March",
  "April",
  "May",
  "June",
  "July",
  "August",
  "September",
  "October",
  "November",
  "December",
];

/**
 * An ISO time (`2026-12-01`, `2026-12-01T08:00`, `2026-12-01 08:00:00.5+02:00`; without a zone it
 * is UTC), checked against the calendar and the accepted range.
 *
 * @example
 * ```ts
 * import { parseIsoTime } from "./since.ts";
 *
 * parseIsoTime("2026-12-01T08:00:00Z"); // { ok: true, time: 2026-12-01T08:00:00.000Z }
 * parseIsoTime("2026-02-31"); // { ok: false, problem: "is not a date: February 2026 has 28 days" }
 * ```
 */
export function parseIsoTime(text: string): TimeParse {
  const m = ISO.exec(text);
  if (m === null) return { ok: false, problem: "is not an ISO time" };
  const [year, month, day] = [Number(m[1]), Number(m[2]), Number(m[3])];
  const [hour, minute, second] = [Number(m[4] ?? 0), Number(m[5] ?? 0), Number(m[6] ?? 0)];
  if (month < 1 || month > 12) {
    return { ok: false, problem: `is not a date: there is no month ${m[2]}` };
  }
  const days = daysIn(year, month);
  if (day < 1 || day > days) {
    return {
      ok: false,
      problem: `is not a date: ${MONTHS[month - 1]} ${m[1]} has ${days} days`,
    };
  }
  if (hour > 23 || minute > 59 || second > 59) {
    return { ok: false, problem: "is not a time: hours go to 23, minutes and seconds to 59" };
  }
  const offset = offsetMinutes(m[8]);
  if (offset === undefined) {
    return { ok: false, problem: `is not a time: the zone ${m[8]} is beyond ±23:59` };
  }
  const date = new Date(0);
  // setUTCFullYear, not Date.UTC: Date.UTC reads the years 0 to 99 as 1900 to 1999.
  date.setUTCFullYear(year, month - 1, day);
  date.setUTCHours(hour, minute, second, Number((m[7] ?? "0").padEnd(3, "0").slice(0, 3)));
  return inRange(date.getTime() - offset * 60_000);
}

/**
 * `ms` (milliseconds since 1970) as a time, or the problem when it is outside the accepted range
 * (an invalid `Date`'s `NaN` included).
 *
 * @example
 * ```ts
 * import { inRange } from "./since.ts";
 *
 * inRange(Date.UTC(2026, 11, 1)); // { ok: true, time: 2026-12-01T00:00:00.000Z }
 * inRange(NaN); // { ok: false, problem: "is not a time" }
 * ```
 */
export function inRange(ms: number): TimeParse {
  if (Number.isNaN(ms)) return { ok: false, problem: "is not a time" };
  if (ms < EARLIEST_SINCE_MS || ms > LATEST_SINCE_MS) {
    return { ok: false, problem: `is out of range: times ${SINCE_RANGE} are accepted` };
  }
  return { ok: true, time: new Date(ms) };
}

function daysIn(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28;
  return [4, 6, 9, 11].includes(month) ? 30 : 31;
}

/** The zone's offset east of UTC in minutes; `undefined` for an impossible one. */
function offsetMinutes(zone: string | undefined): number | undefined {
  if (zone === undefined || zone === "Z") return 0;
  const digits = zone.slice(1).replace(":", "");
  const [hours, minutes] = [Number(digits.slice(0, 2)), Number(digits.slice(2) || "0")];
  if (hours > 23 || minutes > 59) return undefined;
  return (zone[0] === "-" ? -1 : 1) * (hours * 60 + minutes);
}
