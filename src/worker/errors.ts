/**
 * Thrown when a worker's configuration is invalid: names the option, the value, and what to use
 * instead.
 *
 * @example
 * ```ts
 * import { WorkerConfigError } from "@pgflow/shared";
 *
 * const error = new WorkerConfigError("maxConcurrent must be an integer from 1 to 1000, got 0");
 * console.log(error.name); // "WorkerConfigError"
 * ```
 */
export class WorkerConfigError extends Error {
  /** Creates the error with a message that names the option, the value and the fix. */
  constructor(message: string) {
    super(message);
    this.name = "WorkerConfigError";
  }
}

/**
 * Thrown when a worker cannot start: a duplicate flow slug, a queue outside the routes, a
 * definition that differs from the stored one (with every difference), or a database error during
 * startup. When it is thrown no worker row exists and nothing was polled.
 *
 * @example
 * ```ts
 * import { WorkerStartupError } from "@pgflow/shared";
 *
 * const error = new WorkerStartupError("flow triage_v1 differs from the stored definition", [
 *   "step classify: dependencies differ",
 * ]);
 * console.log(error.differences.length); // 1
 * ```
 */
export class WorkerStartupError extends Error {
  /** Shape or route differences reported by the database, when that was the cause. */
  readonly differences: readonly string[];

  /**
   * Creates the error.
   *
   * @param message what went wrong and what to do
   * @param differences the differences the database reported, if any
   */
  constructor(message: string, differences: readonly string[] = []) {
    super(message);
    this.name = "WorkerStartupError";
    this.differences = Object.freeze([...differences]);
  }
}
