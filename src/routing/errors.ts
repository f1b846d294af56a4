/**
 * Thrown when routing is invalid: a bad queue name, a route map that misses or invents steps,
 * or a private queue name that cannot fit PGMQ's limit.
 *
 * @example
 * ```ts
 * import { RoutingError, validateQueueName } from "@pgflow/shared";
 *
 * try {
 *   validateQueueName("Thread-Processing");
 * } catch (error) {
 *   console.log(error instanceof RoutingError); // true
 * }
 * ```
 */
export class RoutingError extends Error {
  /** Creates the error with a message that names the offending value and the fix. */
  constructor(message: string) {
    super(message);
    this.name = "RoutingError";
  }
}
