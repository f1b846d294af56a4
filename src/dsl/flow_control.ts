/**
 * Flow control's options (docs/flow-control.md): a step's priority among tasks waiting for
 * capacity, its concurrency limit and its rate limit across every worker. SQL validates the same values the same
 * way (`pgflow._flow_control_problems`, `pgflow.flow_control_bounds()`).
 *
 * @module
 */
import { FlowDefinitionError } from "./errors.ts";
import type { OptionBounds } from "./options.ts";

/**
 * A concurrency limit: at most `limit` tasks of one key queued or started at once, across every
 * worker. `key` is a JSON path (`$.customerId`) read from the run input (`keyFrom: "run"`, the
 * default) or from the step's own input (`keyFrom: "input"`: a map task's element, a dependent
 * step's dependency outputs); without a key all tasks share one. `scope` names a limit shared by
 * every step, flow and version that names it; without one the limit is the step's own, shared by
 * the versions deployed under one alias.
 *
 * @example
 * ```ts
 * import type { ConcurrencyLimit } from "@pgflow/shared";
 *
 * const perChannel: ConcurrencyLimit = { limit: 1, key: "$.channel", scope: "slack-api" };
 * ```
 */
export interface ConcurrencyLimit {
  /** Tasks of one key at once, from 1 to 100,000. */
  readonly limit: number;
  /** A JSON path giving each task's key, e.g. `$.customerId`. */
  readonly key?: string;
  /** Where the key is read: `"run"` (the run input, default) or `"input"` (the step's input). */
  readonly keyFrom?: "run" | "input";
  /** A limit shared across steps, flows and versions (`"slack-api"`). */
  readonly scope?: string;
}

/**
 * A rate limit: at most `limit` tasks of one key start in any window of length `per`, across
 * every worker. `per` is milliseconds or a text such as `"1 second"`, `"500 ms"`, `"2 minutes"`
 * (10 ms to a day). `key` and `keyFrom` read each task's key as {@link ConcurrencyLimit}'s do;
 * without a key all tasks share one window. The window belongs to the step, shared by the
 * versions deployed under one alias.
 *
 * @example
 * ```ts
 * import type { RateLimit } from "@pgflow/shared";
 *
 * const slack: RateLimit = { limit: 1, per: "1 second", key: "$.channel" };
 * ```
 */
export interface RateLimit {
  /** Starts of one key per window, from 1 to 100,000. */
  readonly limit: number;
  /** The window: milliseconds, or a text such as `"1 second"` or `"500 ms"`. */
  readonly per: number | string;
  /** A JSON path giving each task's key, e.g. `$.channel`. */
  readonly key?: string;
  /** Where the key is read: `"run"` (the run input, default) or `"input"` (the step's input). */
  readonly keyFrom?: "run" | "input";
}

/**
 * Flow-control options of a step, or of a flow as the default of its steps.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ customerId: string }>({ slug: "sync" })
 *   .step({ slug: "push", concurrency: { limit: 3, key: "$.customerId" }, priority: 5 }, () => 1);
 * ```
 */
export interface FlowControlOptions {
  /** Rank among tasks waiting for the same capacity, -1,000 to 1,000; higher goes first. */
  readonly priority?: number;
  /** A limit of tasks at once: a number, or a {@link ConcurrencyLimit} with a key or scope. */
  readonly concurrency?: number | ConcurrencyLimit;
  /** At most `limit` starts per `per` (per key): a {@link RateLimit}. */
  readonly rateLimit?: RateLimit;
}

/**
 * The accepted range of flow control's numbers, the same as SQL's
 * `pgflow.flow_control_bounds()` (tests/sql/flow_control_compile_test.ts compares the two).
 * Internal: the DSL and the client check options against it.
 */
export const FLOW_CONTROL_BOUNDS: Readonly<
  Record<"priority" | "concurrency" | "rateLimit" | "ratePerMs", OptionBounds>
> = Object.freeze({
  priority: Object.freeze({ min: -1000, max: 1000 }),
  concurrency: Object.freeze({ min: 1, max: 100_000 }),
  rateLimit: Object.freeze({ min: 1, max: 100_000 }),
  ratePerMs: Object.freeze({ min: 10, max: 86_400_000 }),
});

const SCOPE = /^[A-Za-z0-9_.:-]{1,100}$/;
const LIMIT_KEYS: ReadonlySet<string> = new Set(["limit", "key", "keyFrom", "scope"]);

function show(value: unknown): string {
  return JSON.stringify(value) ?? String(value);
}

function checkRange(
  name: "priority" | "concurrency" | "rateLimit",
  label: string,
  value: unknown,
  where: string,
) {
  const { min, max } = FLOW_CONTROL_BOUNDS[name];
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new FlowDefinitionError(
      `${where}: ${label} is ${
        show(value)
      }, but it must be an integer between ${min} and ${max}; ` +
        `write e.g. ${label}: ${name === "priority" ? 10 : 3}`,
    );
  }
}

const UNIT_MS: Readonly<Record<string, number>> = Object.freeze({
  ms: 1,
  millisecond: 1,
  s: 1000,
  sec: 1000,
  second: 1000,
  min: 60_000,
  minute: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  day: 86_400_000,
});
const PER = /^\s*(\d+(?:\.\d+)?)?\s*([a-z]+?)s?\s*$/;

/**
 * A rate limit's interval in milliseconds: a number is milliseconds, a text is a count and a unit
 * (`"1 second"`, `"500 ms"`, `"2 minutes"`, `"hour"`). `undefined` when it is neither.
 */
function perMs(per: unknown): number | undefined {
  if (typeof per === "number") return per;
  if (typeof per !== "string") return undefined;
  const m = PER.exec(per.toLowerCase());
  if (m === null) return undefined;
  const unit = UNIT_MS[m[2]] ?? UNIT_MS[m[2] + "s"];
  if (unit === undefined) return undefined;
  return Math.round(Number(m[1] ?? 1) * unit * 1000) / 1000;
}

function checkKey(
  option: string,
  key: unknown,
  keyFrom: unknown,
  where: string,
  example: string,
): void {
  if (key !== undefined && (typeof key !== "string" || !/^\s*(strict\s+|lax\s+)?\$/.test(key))) {
    throw new FlowDefinitionError(
      `${where}: ${option}.key is ${show(key)}, not a JSON path; write e.g. key: "${example}"`,
    );
  }
  if (keyFrom !== undefined && keyFrom !== "run" && keyFrom !== "input") {
    throw new FlowDefinitionError(
      `${where}: ${option}.keyFrom is ${show(keyFrom)}; write "run" (the run input) or ` +
        `"input" (the step's input)`,
    );
  }
  if (keyFrom !== undefined && key === undefined) {
    throw new FlowDefinitionError(
      `${where}: ${option}.keyFrom needs a key; add key: "${example}" or remove keyFrom`,
    );
  }
}

const RATE_KEYS: ReadonlySet<string> = new Set(["limit", "per", "key", "keyFrom"]);

/** Checks a rateLimit option and returns it with `per` in milliseconds. */
function normalizeRateLimit(r: unknown, where: string): RateLimit {
  if (r === null || typeof r !== "object") {
    throw new FlowDefinitionError(
      `${where}: rateLimit is ${
        show(r)
      }; write e.g. { limit: 1, per: "1 second", key: "$.channel" }`,
    );
  }
  for (const key of Object.keys(r)) {
    if (!RATE_KEYS.has(key)) {
      throw new FlowDefinitionError(
        `${where}: rateLimit has an unknown option "${key}"; use limit, per, key or keyFrom`,
      );
    }
  }
  const rate = r as RateLimit;
  checkRange("rateLimit", "rateLimit.limit", rate.limit, where);
  const ms = perMs(rate.per);
  const { min, max } = FLOW_CONTROL_BOUNDS.ratePerMs;
  if (ms === undefined || !Number.isInteger(ms) || ms < min || ms > max) {
    throw new FlowDefinitionError(
      `${where}: rateLimit.per is ${show(rate.per)}, but it must be a whole number of ` +
        `milliseconds from ${min} to ${max} (a day), or a text such as "1 second" or "500 ms"; ` +
        `write e.g. per: "1 second"`,
    );
  }
  checkKey("rateLimit", rate.key, rate.keyFrom, where, "$.channel");
  return Object.freeze({
    limit: rate.limit,
    per: ms,
    ...(rate.key === undefined ? {} : { key: rate.key }),
    ...(rate.keyFrom === undefined ? {} : { keyFrom: rate.keyFrom }),
  });
}

/**
 * Checks flow-control options and returns them normalized (a number limit becomes
 * `{ limit }`), only those that were set. Throws a {@link FlowDefinitionError} naming the place,
 * the option, the value and the fix.
 *
 * @example
 * ```ts
 * import { normalizeFlowControl } from "./flow_control.ts";
 *
 * normalizeFlowControl({ concurrency: 3 }, 'step "push"'); // { concurrency: { limit: 3 } }
 * ```
 */
export function normalizeFlowControl(
  options: FlowControlOptions,
  where: string,
): FlowControlOptions {
  const out: { priority?: number; concurrency?: ConcurrencyLimit; rateLimit?: RateLimit } = {};
  if (options.priority !== undefined) {
    checkRange("priority", "priority", options.priority, where);
    out.priority = options.priority;
  }
  if (options.rateLimit !== undefined) out.rateLimit = normalizeRateLimit(options.rateLimit, where);
  const c = options.concurrency;
  if (c === undefined) return Object.freeze(out);
  if (typeof c === "number") {
    checkRange("concurrency", "concurrency", c, where);
    out.concurrency = Object.freeze({ limit: c });
    return Object.freeze(out);
  }
  if (c === null || typeof c !== "object") {
    throw new FlowDefinitionError(
      `${where}: concurrency is ${show(c)}; write a number (concurrency: 3) or ` +
        `{ limit: 3, key: "$.customerId" }`,
    );
  }
  for (const key of Object.keys(c)) {
    if (!LIMIT_KEYS.has(key)) {
      throw new FlowDefinitionError(
        `${where}: concurrency has an unknown option "${key}"; use limit, key, keyFrom or scope`,
      );
    }
  }
  checkRange("concurrency", "concurrency.limit", c.limit, where);
  checkKey("concurrency", c.key, c.keyFrom, where, "$.customerId");
  if (c.scope !== undefined && (typeof c.scope !== "string" || !SCOPE.test(c.scope))) {
    throw new FlowDefinitionError(
      `${where}: concurrency.scope is ${show(c.scope)}; use 1 to 100 letters, digits, "_", ".", ` +
        `":" or "-", e.g. scope: "slack-api"`,
    );
  }
  out.concurrency = Object.freeze({
    limit: c.limit,
    ...(c.key === undefined ? {} : { key: c.key }),
    ...(c.keyFrom === undefined ? {} : { keyFrom: c.keyFrom }),
    ...(c.scope === undefined ? {} : { scope: c.scope }),
  });
  return Object.freeze(out);
}
