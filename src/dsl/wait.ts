/**
 * Waiting steps: what `.waitForEvent()` and `.sleep()` record. Such a step has no handler and no
 * message; SQL starts its wait when it becomes ready and ends it when the event arrives or its
 * time comes (supabase/schemas/0280_events.sql, docs/waiting.md).
 *
 * @module
 */
import { FlowDefinitionError } from "./errors.ts";
import { findNonJson, type Json } from "./json.ts";
import type { StandardSchemaV1 } from "./input_schema.ts";
import type { AnyStepHandler } from "./types.ts";

/** A unit of {@link Duration}. */
export type DurationUnit =
  | "s"
  | "second"
  | "seconds"
  | "m"
  | "min"
  | "minute"
  | "minutes"
  | "h"
  | "hour"
  | "hours"
  | "d"
  | "day"
  | "days"
  | "w"
  | "week"
  | "weeks";

/**
 * A length of time: whole seconds, or a text such as `"90 s"`, `"15 minutes"`, `"3 days"`.
 *
 * @example
 * ```ts
 * import type { Duration } from "@pgflow/shared";
 *
 * const remindAfter: Duration = "2 days";
 * ```
 */
export type Duration = number | `${number} ${DurationUnit}` | `${number}${DurationUnit}`;

const UNIT_SECONDS: Readonly<Record<string, number>> = {
  s: 1,
  second: 1,
  seconds: 1,
  m: 60,
  min: 60,
  minute: 60,
  minutes: 60,
  h: 3600,
  hour: 3600,
  hours: 3600,
  d: 86400,
  day: 86400,
  days: 86400,
  w: 604800,
  week: 604800,
  weeks: 604800,
};

/** The longest wait: a year, as SQL's bound (steps_wait_seconds_range). */
const MAX_WAIT_SECONDS = 31_536_000;

/**
 * A {@link Duration} in whole seconds (0 to a year). Throws a {@link FlowDefinitionError} that
 * names the value and shows a valid one.
 *
 * @example
 * ```ts
 * import { durationSeconds } from "@pgflow/shared";
 *
 * durationSeconds("3 days", "timeout"); // 259200
 * ```
 */
export function durationSeconds(value: unknown, where: string): number {
  let seconds: number | undefined;
  if (typeof value === "number") {
    seconds = value;
  } else if (typeof value === "string") {
    const match = /^\s*(\d+(?:\.\d+)?)\s*([a-z]+)\s*$/i.exec(value);
    const unit = match ? UNIT_SECONDS[match[2].toLowerCase()] : undefined;
    if (match && unit !== undefined) seconds = Number(match[1]) * unit;
  }
  if (
    seconds === undefined || !Number.isInteger(seconds) || seconds < 0 ||
    seconds > MAX_WAIT_SECONDS
  ) {
    throw new FlowDefinitionError(
      `${where}: ${JSON.stringify(value) ?? String(value)} is not a duration of whole seconds ` +
        `up to a year; write e.g. 3600, "90 s", "15 minutes", "3 days" or "2 weeks"`,
    );
  }
  return seconds;
}

/**
 * An event step's wait as compiled: the event, the correlation key's JSON path into the run
 * input, the timeout in seconds and what it completes with when the timeout passes.
 */
export interface EventWait {
  /** Always `"event"`. */
  readonly kind: "event";
  /** The event name `send_event` must name. */
  readonly event: string;
  /** JSON path into the run input giving the correlation key (e.g. `$.orderId`). */
  readonly key?: string;
  /** Timeout in seconds; absent: waits until an event, a cancel or forever. */
  readonly seconds?: number;
  /** Completes the step with this value at the timeout; absent: the timeout fails the step. */
  readonly onTimeout?: { readonly value: Json };
}

/** A sleep's wait as compiled: a duration in seconds, or a JSON path into the step's input. */
export interface SleepWait {
  /** Always `"sleep"`. */
  readonly kind: "sleep";
  /** How long to sleep, in seconds. */
  readonly seconds?: number;
  /** JSON path into the step's input giving the time to wake at (ISO 8601). */
  readonly until?: string;
}

/**
 * What a waiting step waits for, as it is compiled (`StepShape.wait`).
 *
 * @example
 * ```ts
 * import type { WaitDefinition } from "@pgflow/shared";
 *
 * const wait: WaitDefinition = { kind: "event", event: "approved", seconds: 259200 };
 * ```
 */
export type WaitDefinition = EventWait | SleepWait;

/**
 * A payload type with no check at run time: `payload: eventPayload<{ approved: boolean }>()`
 * types the event step's output. Pass a Standard Schema (zod, valibot, ...) instead to have the
 * client check each payload before sending it.
 *
 * @example
 * ```ts
 * import { eventPayload, Flow } from "@pgflow/shared";
 *
 * new Flow<{ orderId: string }>({ slug: "approval_v1" })
 *   .waitForEvent({ slug: "approval", event: "approved", payload: eventPayload<{ ok: boolean }>() });
 * ```
 */
export function eventPayload<TPayload extends Json>(): StandardSchemaV1<TPayload, TPayload> {
  return {
    "~standard": {
      version: 1,
      vendor: "pgflow",
      validate: (value: unknown) => ({ value: value as TPayload }),
    },
  };
}

/** A JSON path option (`key`, `until`): `$` or `$.a.b`, checked again by SQL's jsonpath. */
export function checkJsonPath(name: string, value: unknown, where: string): string {
  if (typeof value !== "string" || !/^\$(\.[A-Za-z_][A-Za-z0-9_]*|\[\d+\])*$/.test(value)) {
    throw new FlowDefinitionError(
      `${where}: ${name} must be a JSON path such as "$.orderId", got ${
        JSON.stringify(value) ?? String(value)
      }`,
    );
  }
  return value;
}

const EVENT_NAME = /^[A-Za-z0-9_.:-]{1,100}$/;

/** The compiled wait of `.waitForEvent()`'s options; throws for a bad event, key or timeout. */
export function eventWait(
  options: { event?: unknown; key?: unknown; timeout?: unknown; onTimeout?: unknown },
  where: string,
): EventWait {
  if (typeof options.event !== "string" || !EVENT_NAME.test(options.event)) {
    throw new FlowDefinitionError(
      `${where}: event must be a name of 1 to 100 letters, digits, _ . : or -, got ${
        JSON.stringify(options.event) ?? String(options.event)
      }`,
    );
  }
  const seconds = options.timeout === undefined
    ? undefined
    : durationSeconds(options.timeout, `${where}, timeout`);
  let onTimeout: { value: Json } | undefined;
  if (options.onTimeout !== undefined && options.onTimeout !== "fail") {
    const value = (options.onTimeout as { value?: unknown } | null)?.value;
    if (
      typeof options.onTimeout !== "object" || options.onTimeout === null ||
      !("value" in options.onTimeout)
    ) {
      throw new FlowDefinitionError(
        `${where}: onTimeout must be "fail" or { value: <JSON> }, got ${
          JSON.stringify(options.onTimeout) ?? String(options.onTimeout)
        }`,
      );
    }
    const bad = findNonJson(value);
    if (bad !== undefined) {
      throw new FlowDefinitionError(`${where}: onTimeout's value is not plain JSON at ${bad}`);
    }
    if (seconds === undefined) {
      throw new FlowDefinitionError(
        `${where}: onTimeout needs a timeout; add timeout: "3 days" or remove onTimeout`,
      );
    }
    onTimeout = Object.freeze({ value: value as Json });
  }
  return Object.freeze({
    kind: "event",
    event: options.event,
    ...(options.key === undefined ? {} : { key: checkJsonPath("key", options.key, where) }),
    ...(seconds === undefined ? {} : { seconds }),
    ...(onTimeout === undefined ? {} : { onTimeout }),
  });
}

/** The compiled wait of `.sleep()`'s options: exactly one of `for` and `until`. */
export function sleepWait(options: { for?: unknown; until?: unknown }, where: string): SleepWait {
  if ((options.for === undefined) === (options.until === undefined)) {
    throw new FlowDefinitionError(
      `${where}: a sleep needs exactly one of for: "2 days" and until: "$.remindAt"`,
    );
  }
  return Object.freeze(
    options.for !== undefined
      ? { kind: "sleep", seconds: durationSeconds(options.for, `${where}, for`) }
      : { kind: "sleep", until: checkJsonPath("until", options.until, where) },
  );
}

/** A waiting step's handler: never called, since a wait has no message to claim. */
export const waitsInSql: AnyStepHandler = () => {
  throw new Error(
    "a waiting step (event or sleep) completes in SQL: no worker runs it; in runFlowInMemory, " +
      "give it a handler in options.handlers that returns the event's payload (or the wake time)",
  );
};
