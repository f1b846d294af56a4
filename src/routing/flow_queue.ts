import { RoutingError } from "./errors.ts";
import { validateQueueName } from "./queue_name.ts";

/**
 * The queue of a plain flow: its slug lowercased. Throws a {@link RoutingError} when that is not
 * a valid queue name (longer than 47 characters).
 *
 * @example
 * ```ts
 * import { flowQueueName } from "./flow_queue.ts";
 *
 * flowQueueName("Thread_Triage_v1"); // "thread_triage_v1"
 * ```
 */
export function flowQueueName(flowSlug: string): string {
  const queue = flowSlug.toLowerCase();
  try {
    validateQueueName(queue, `queue of flow "${flowSlug}"`);
  } catch (error) {
    throw new RoutingError(
      `${(error as Error).message}. A plain flow uses its slug as its queue; use a shorter flow ` +
        `slug, or route it with routeFlow() or withStepQueues()`,
    );
  }
  return queue;
}
