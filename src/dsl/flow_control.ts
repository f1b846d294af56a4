/**
 * Flow control's options (docs/flow-control.md): a step's priority among tasks waiting for
 * capacity, and its concurrency limit across every worker. SQL validates the same values the same
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
}

/**
 * The accepted range of flow control's numbers, the same as SQL's
 * `pgflow.flow_control_bounds()` (tests/sql/flow_control_compile_test.ts compares the two).
 * Internal: the DSL and the client check options against it.
 */
export const FLOW_CONTROL_BOUNDS: Readonly<Record<"priority" | "concurrency", OptionBounds>> =
  Object.freeze({
    priority: Object.freeze({ min: -1000, max: 1000 }),
    concurrency: Object.freeze({ min: 1, max: 100_000 }),
  });

const SCOPE = /^[A-Za-z0-9_.:-]{1,100}$/;
const LIMIT_KEYS: ReadonlySet<string> = new Set(["limit", "key", "keyFrom", "scope"]);

function show(value: unknown): string {
  return JSON.stringify(value) ?? String(value);
}

function checkRange(
  name: "priority" | "concurrency",
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
  const out: { priority?: number; concurrency?: ConcurrencyLimit } = {};
  if (options.priority !== undefined) {
    checkRange("priority", "priority", options.priority, where);
    out.priority = options.priority;
  }
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
  if (
    c.key !== undefined && (typeof c.key !== "string" || !/^\s*(strict\s+|lax\s+)?\$/.test(c.key))
  ) {
    throw new FlowDefinitionError(
      `${where}: concurrency.key is ${
        show(c.key)
      }, not a JSON path; write e.g. key: "$.customerId"`,
    );
  }
  if (c.keyFrom !== undefined && c.keyFrom !== "run" && c.keyFrom !== "input") {
    throw new FlowDefinitionError(
      `${where}: concurrency.keyFrom is ${show(c.keyFrom)}; write "run" (the run input) or ` +
        `"input" (the step's input)`,
    );
  }
  if (c.keyFrom !== undefined && c.key === undefined) {
    throw new FlowDefinitionError(
      `${where}: concurrency.keyFrom needs a key; add key: "$.customerId" or remove keyFrom`,
    );
  }
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
