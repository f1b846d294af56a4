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
  /** Attempts before the step is exhausted; an integer ≥ 1. */
  readonly maxAttempts?: number;
  /** Retry delay base in seconds (doubles per attempt); an integer ≥ 1. */
  readonly baseDelay?: number;
  /** Seconds a task may run before it counts as stalled; an integer ≥ 3. */
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
  /** Seconds to wait after the step becomes ready before its task is sent; an integer ≥ 0. */
  readonly startDelay?: number;
}

/** Minimum of each numeric option, the same bounds as the SQL checks. */
const MINIMUMS: Readonly<Record<keyof StepRuntimeOptions, number>> = {
  maxAttempts: 1,
  baseDelay: 1,
  timeout: 3,
  startDelay: 0,
};

/** Largest value Postgres can hold in an `int` column. */
const MAX_INT = 2147483647;

function checkInteger(name: keyof StepRuntimeOptions, value: unknown, where: string): void {
  if (value === undefined) return;
  const min = MINIMUMS[name];
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > MAX_INT) {
    throw new FlowDefinitionError(
      `${where}: ${name} is ${JSON.stringify(value) ?? String(value)}, but it must be an ` +
        `integer between ${min} and ${MAX_INT}; write e.g. ${name}: ${
          Math.max(min, Math.round(Number(value)) || min)
        }`,
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
