import { RoutingError } from "./errors.ts";

/**
 * PGMQ builds table names such as `pgmq.a_<queue>` and Postgres truncates identifiers at 63
 * bytes, so PGMQ refuses names longer than 47 characters.
 */
export const MAX_QUEUE_NAME_LENGTH = 47;

/** Canonical lowercase names: a letter, then lowercase letters, digits and underscores. */
const QUEUE_NAME_PATTERN = /^[a-z][a-z0-9_]*$/;

/**
 * Turns any text into the closest explicit queue name that {@link validateQueueName} accepts:
 * lowercased, other characters replaced by `_`, runs of `_` collapsed, a letter first, and cut to
 * 47 characters. Used in error messages so they can say what to write instead.
 *
 * @example
 * ```ts
 * import { suggestQueueName } from "./queue_name.ts";
 *
 * suggestQueueName("Thread-Processing"); // "thread_processing"
 * ```
 */
export function suggestQueueName(name: string): string {
  const cleaned = String(name)
    .toLowerCase()
    .replace(/[^a-z0-9_]+/g, "_")
    .replace(/_+/g, "_")
    .replace(/^[^a-z]+/, "")
    .slice(0, MAX_QUEUE_NAME_LENGTH)
    .replace(/_+$/, "");
  return cleaned === "" ? "my_queue" : cleaned;
}

/**
 * Checks an explicit (shared) queue name: lowercase `[a-z][a-z0-9_]*`, no `__`, at most 47
 * characters. `__` is reserved for generated private queues (`flow__step`), so a shared name can
 * never collide with one. Throws a {@link RoutingError} that names the value and suggests a
 * valid one. SQL checks the same rules again.
 *
 * @param name the queue name
 * @param what what the name is for, used in the message (for example `'queue of step "enrich"'`)
 * @example
 * ```ts
 * import { validateQueueName } from "@pgflow/shared";
 *
 * validateQueueName("thread_processing"); // ok
 * try {
 *   validateQueueName("Thread Processing");
 * } catch (error) {
 *   console.log((error as Error).message); // ... write "thread_processing" instead
 * }
 * ```
 */
export function validateQueueName(name: string, what: string = "queue name"): void {
  if (typeof name !== "string") {
    throw new RoutingError(
      `${what} must be a string, got ${
        name === null ? "null" : typeof name
      }; write a name such as "thread_processing"`,
    );
  }
  if (name.length === 0) {
    throw new RoutingError(`${what} is empty; write a name such as "thread_processing"`);
  }
  if (name.length > MAX_QUEUE_NAME_LENGTH) {
    throw new RoutingError(
      `${what} "${name}" is ${name.length} characters long; PGMQ allows at most ` +
        `${MAX_QUEUE_NAME_LENGTH}, so shorten it, e.g. "${suggestQueueName(name)}"`,
    );
  }
  if (!QUEUE_NAME_PATTERN.test(name)) {
    throw new RoutingError(
      `${what} "${name}" is invalid: use lowercase letters, digits and underscores, starting ` +
        `with a letter; write "${suggestQueueName(name)}" instead`,
    );
  }
  if (name.includes("__")) {
    throw new RoutingError(
      `${what} "${name}" contains "__", which is reserved for generated private step queues; ` +
        `write "${suggestQueueName(name)}" instead`,
    );
  }
}
