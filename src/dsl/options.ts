import { FlowDefinitionError } from "./errors.ts";

/**
 * What happens when a step's `if`/`ifNot` condition is not met (`whenUnmet`) or when its
 * attempts are exhausted (`whenExhausted`): fail the run, skip the step (dependents run without
 * its key), or skip it together with every step that depends on it.
 *
 * @example
 * ```ts
 * import type { WhenMode } from "@pgflow/shared";
 *
 * const mode: WhenMode = "skip-cascade";
 * ```
 */
export type WhenMode = "fail" | "skip" | "skip-cascade";

/** The accepted {@link WhenMode} values, for run-time checks. */
export const WHEN_MODES: readonly WhenMode[] = Object.freeze(["fail", "skip", "skip-cascade"]);

/**
 * Retry and timeout options a flow sets for all its steps (steps may override them). Unset
 * values take the SQL defaults.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ id: string }>({ slug: "sync", maxAttempts: 5, baseDelay: 2, timeout: 30 });
 * ```
 */
export interface RuntimeOptions {
  /** Attempts before the step is exhausted; an integer from 1 to 1,000. */
  readonly maxAttempts?: number;
  /** Retry delay base in seconds (doubles per attempt); an integer from 1 to 31,536,000 (365 days). */
  readonly baseDelay?: number;
  /** Seconds a task may run before it counts as stalled; an integer from 3 to 31,536,000. */
  readonly timeout?: number;
}

/**
 * Options of one step, beyond {@link RuntimeOptions}.
 *
 * @example
 * ```ts
 * import type { StepRuntimeOptions } from "@pgflow/shared";
 *
 * const options: StepRuntimeOptions = { maxAttempts: 1, startDelay: 60 };
 * ```
 */
export interface StepRuntimeOptions extends RuntimeOptions {
  /** Seconds to wait after the step becomes ready before its task is sent; 0 to 31,536,000. */
  readonly startDelay?: number;
}

/** The bounds of one numeric option: an integer from `min` to `max`, both included. */
export interface OptionBounds {
  /** Smallest accepted value. */
  readonly min: number;
  /** Largest accepted value. */
  readonly max: number;
}

/**
 * The accepted range of every numeric option. SQL enforces the same table
 * (`pgflow.option_bounds()`, used by `create_flow`, `add_step` and the table checks), and both are
 * tested against `tests/fixtures/option_bounds.json`. The maxima keep every sum SQL computes from
 * them (a claim's visibility of timeout + 2 s, stalled recovery's timeout + 30 s, the retry delay
 * base_delay * 2^(attempt - 1)) far inside Postgres's `integer`, so no flow's options can break a
 * claim batch or stalled recovery for other flows: 1,000 attempts, 365 days for each duration.
 */
export const OPTION_BOUNDS: Readonly<Record<keyof StepRuntimeOptions, OptionBounds>> = Object
  .freeze({
    maxAttempts: Object.freeze({ min: 1, max: 1000 }),
    baseDelay: Object.freeze({ min: 1, max: 31_536_000 }),
    timeout: Object.freeze({ min: 3, max: 31_536_000 }),
    startDelay: Object.freeze({ min: 0, max: 31_536_000 }),
  });

function checkInteger(name: keyof StepRuntimeOptions, value: unknown, where: string): void {
  if (value === undefined) return;
  const { min, max } = OPTION_BOUNDS[name];
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    const suggestion = Math.min(max, Math.max(min, Math.round(Number(value)) || min));
    throw new FlowDefinitionError(
      `${where}: ${name} is ${JSON.stringify(value) ?? String(value)}, but it must be an ` +
        `integer between ${min} and ${max}${
          name === "maxAttempts" ? "" : " (seconds)"
        }; write e.g. ${name}: ${suggestion}`,
    );
  }
}

/** Validates flow-level options; throws a {@link FlowDefinitionError} naming the option. */
export function validateRuntimeOptions(options: RuntimeOptions, where: string): void {
  checkInteger("maxAttempts", options.maxAttempts, where);
  checkInteger("baseDelay", options.baseDelay, where);
  checkInteger("timeout", options.timeout, where);
}

/** Validates step-level options; throws a {@link FlowDefinitionError} naming the option. */
export function validateStepRuntimeOptions(options: StepRuntimeOptions, where: string): void {
  validateRuntimeOptions(options, where);
  checkInteger("startDelay", options.startDelay, where);
}

/** Validates a `whenUnmet`/`whenExhausted` value. */
export function validateWhenMode(name: string, value: unknown, where: string): void {
  if (value === undefined) return;
  if (!WHEN_MODES.includes(value as WhenMode)) {
    throw new FlowDefinitionError(
      `${where}: ${name} is ${JSON.stringify(value) ?? String(value)}; write one of ${
        WHEN_MODES.map((mode) => `"${mode}"`).join(", ")
      }`,
    );
  }
}

/** Copies only the defined runtime options, so definitions never carry `undefined` keys. */
export function pickStepRuntimeOptions(options: StepRuntimeOptions): StepRuntimeOptions {
  const picked: { -readonly [K in keyof StepRuntimeOptions]: number } = {};
  for (const key of ["maxAttempts", "baseDelay", "timeout", "startDelay"] as const) {
    if (options[key] !== undefined) picked[key] = options[key];
  }
  return Object.freeze(picked);
}
