import { RoutingError } from "./errors.ts";
import { MAX_QUEUE_NAME_LENGTH } from "./queue_name.ts";

/**
 * The private queue name of one step, exactly as SQL resolves it: `lower(flow__step)` when that
 * fits in 47 characters, else `lower(flow__<stepIndex>)` (0-based definition order), else a
 * {@link RoutingError}. Names are never truncated or hashed, so a name always points back to its
 * step. The shared case table `tests/fixtures/private_queue_names.json` keeps this function and
 * the SQL resolver in agreement.
 *
 * @param flowSlug the concrete flow slug
 * @param stepSlug the step slug
 * @param stepIndex the step's 0-based index in definition order
 * @example
 * ```ts
 * import { privateQueueName } from "@pgflow/shared";
 *
 * privateQueueName("Thread_Triage_v1", "Classify", 0); // "thread_triage_v1__classify"
 * ```
 */
export function privateQueueName(flowSlug: string, stepSlug: string, stepIndex: number): string {
  if (!Number.isInteger(stepIndex) || stepIndex < 0) {
    throw new RoutingError(
      `step index of "${stepSlug}" is ${stepIndex}; it must be a 0-based integer position`,
    );
  }
  const readable = `${flowSlug}__${stepSlug}`.toLowerCase();
  if (readable.length <= MAX_QUEUE_NAME_LENGTH) return readable;
  const indexed = `${flowSlug}__${stepIndex}`.toLowerCase();
  if (indexed.length <= MAX_QUEUE_NAME_LENGTH) return indexed;
  throw new RoutingError(
    `flow "${flowSlug}" is too long for private step queues: even "${indexed}" has ` +
      `${indexed.length} characters and PGMQ allows ${MAX_QUEUE_NAME_LENGTH}; use a flow slug of ` +
      `at most ${MAX_QUEUE_NAME_LENGTH - 2 - String(stepIndex).length} characters, or route the ` +
      `steps to shared queues with routeFlow()`,
  );
}
