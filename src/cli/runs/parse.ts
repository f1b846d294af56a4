/**
 * The values `pgflow runs` takes: a run id, a status, a time (`--since 1h` or an ISO time) and a
 * limit. Each bad value is a one-line {@link UsageError} naming the value and the fix.
 *
 * @module
 */
import { EARLIEST_SINCE_MS, inRange, parseIsoTime, SINCE_RANGE } from "../../client/since.ts";
import type { RunStatus } from "../../client/types.ts";
import { UsageError } from "../output.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The run statuses, in the order the help lists them. */
export const RUN_STATUSES: readonly RunStatus[] = ["started", "completed", "failed", "cancelled"];

const UNITS: Readonly<Record<string, number>> = {
  s: 1_000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * A run id as given on the command line (a UUID), lower-cased.
 *
 * @example
 * ```ts
 * import { parseRunId } from "./parse.ts";
 *
 * parseRunId("0B6C1D2E-7F00-4A1B-8C2D-3E4F5A6B7C8D", "pgflow runs show");
 * ```
 */
export function parseRunId(value: string, command: string): string {
  if (!UUID.test(value)) {
    throw new UsageError(
      `${command}: ${JSON.stringify(value)} is not a run id; pass a UUID as ` +
        '"pgflow runs list" prints it (e.g. 0b6c1d2e-7f00-4a1b-8c2d-3e4f5a6b7c8d)',
    );
  }
  return value.toLowerCase();
}

/**
 * A `--status` value.
 *
 * @example
 * ```ts
 * import { parseStatus } from "./parse.ts";
 *
 * parseStatus("failed"); // "failed"
 * ```
 */
export function parseStatus(value: string): RunStatus {
  if (!RUN_STATUSES.includes(value as RunStatus)) {
    throw new UsageError(
      `--status ${JSON.stringify(value)} is not a run status; use one of ${
        RUN_STATUSES.join(", ")
      }`,
    );
  }
  return value as RunStatus;
}

/**
 * A `--since` value: a duration back from `now` (`90s`, `30m`, `1h`, `2d`, `1w`) or an ISO time
 * (`2026-12-01`, `2026-12-01T08:00:00Z`; without a zone it is UTC), read as `listRuns` reads it
 * (`parseIsoTime`): impossible dates and times before the year 1 are usage errors.
 *
 * @example
 * ```ts
 * import { parseSince } from "./parse.ts";
 *
 * parseSince("1h", new Date("2026-12-01T09:00:00Z")).toISOString(); // "2026-12-01T08:00:00.000Z"
 * ```
 */
export function parseSince(value: string, now: Date = new Date()): Date {
  const ago = /^(\d{1,6})(s|m|h|d|w)$/.exec(value);
  const time = ago
    ? inRange(now.getTime() - Number(ago[1]) * UNITS[ago[2]])
    : /^\d{4}-/.test(value)
    ? parseIsoTime(value)
    : undefined;
  if (time?.ok) return time.time;
  if (ago) {
    const most = Math.floor((now.getTime() - EARLIEST_SINCE_MS) / UNITS[ago[2]]);
    throw new UsageError(
      `--since ${JSON.stringify(value)} reaches back before the year 1; times ${SINCE_RANGE} ` +
        `are accepted, so at most ${most}${ago[2]} ago (or pass an ISO time)`,
    );
  }
  throw new UsageError(
    `--since ${JSON.stringify(value)} ${
      time?.problem ?? "is neither a duration nor a time"
    }; pass how long ago (30m, 1h, 2d, 1w) or an ISO time (2026-12-01T08:00:00Z)`,
  );
}

/**
 * A `--limit` value: whole runs from 1 to 1000.
 *
 * @example
 * ```ts
 * import { parseLimit } from "./parse.ts";
 *
 * parseLimit("20"); // 20
 * ```
 */
export function parseLimit(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n < 1 || n > 1000) {
    throw new UsageError(
      `--limit must be a whole number from 1 to 1000, got ${JSON.stringify(value)}`,
    );
  }
  return n;
}

/**
 * A `--id-prefix` value: the start of a run id (hex digits and dashes).
 *
 * @example
 * ```ts
 * import { parseIdPrefix } from "./parse.ts";
 *
 * parseIdPrefix("0b6c1d"); // "0b6c1d"
 * ```
 */
export function parseIdPrefix(value: string): string {
  if (!/^[0-9a-f-]{1,36}$/i.test(value)) {
    throw new UsageError(
      `--id-prefix ${JSON.stringify(value)} is not the start of a run id; pass hex digits and ` +
        "dashes, e.g. 0b6c1d",
    );
  }
  return value.toLowerCase();
}
