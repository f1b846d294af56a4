import type { AnyFlow } from "../dsl/extract.ts";
import type { CompilableFlow } from "../compile/shape.ts";
import { flowQueueName } from "../routing/flow_queue.ts";
import type { RoutedFlow, StepQueuedFlow } from "../routing/routed.ts";
import type { WorkerTarget } from "../routing/selection.ts";
import { WorkerConfigError } from "./errors.ts";

/** A worker target reduced to what startup needs: the one queue and the definitions. */
export interface ResolvedTarget {
  /** The one queue this worker polls. */
  readonly queue: string;
  /** Each supplied definition, as it is compiled (with its routes). */
  readonly definitions: readonly CompilableFlow[];
  /** The flows themselves (handlers and slugs). */
  readonly flows: readonly AnyFlow[];
}

/** The selection fields of a config, read loosely (types are checked by the start signature). */
export interface SelectionInput {
  readonly queueName?: unknown;
  readonly stepSlug?: unknown;
}

function isRouted(value: unknown): value is RoutedFlow {
  return typeof value === "object" && value !== null && (value as RoutedFlow).mode === "routed";
}

function isStepQueued(value: unknown): value is StepQueuedFlow {
  return typeof value === "object" && value !== null && (value as StepQueuedFlow).mode === "step";
}

function isFlow(value: unknown): value is AnyFlow {
  return typeof value === "object" && value !== null &&
    Array.isArray((value as AnyFlow).stepOrder) && typeof (value as AnyFlow).steps === "function";
}

/**
 * Picks the queue and the definitions, checking only what was supplied: routed flows need a
 * `queueName` that one of their routes names, a step-queued flow needs one of its `stepSlug`s, a
 * plain flow takes neither; concrete slugs may appear once (case-insensitively, as in SQL).
 */
export function resolveTarget(target: WorkerTarget, selection: SelectionInput): ResolvedTarget {
  const { queueName, stepSlug } = selection;
  if (Array.isArray(target) || isRouted(target)) {
    const routed: readonly unknown[] = Array.isArray(target) ? target : [target];
    if (routed.length === 0) {
      throw new WorkerConfigError(
        "the list of routed flows is empty; pass at least one routeFlow()",
      );
    }
    routed.forEach((item, i) => {
      if (!isRouted(item)) {
        throw new WorkerConfigError(
          `item ${i} of the list is not a routed flow; wrap each flow with routeFlow(flow, { queues })`,
        );
      }
    });
    const flows = routed as readonly RoutedFlow[];
    rejectDuplicateSlugs(flows.map((r) => r.flow.slug));
    if (stepSlug !== undefined) {
      throw new WorkerConfigError(
        "stepSlug is for withStepQueues() flows; routed flows select their queue with queueName",
      );
    }
    const queues = [...new Set(flows.flatMap((r) => Object.values(r.queues)))];
    if (typeof queueName !== "string" || !queues.includes(queueName)) {
      throw new WorkerConfigError(
        `queueName ${
          queueName === undefined ? "is missing" : `${JSON.stringify(queueName)} is not a route`
        }: routed flows need queueName set to one of their queues: ${
          queues.map((q) => JSON.stringify(q)).join(", ")
        }`,
      );
    }
    return { queue: queueName, definitions: flows, flows: flows.map((r) => r.flow) };
  }
  if (isStepQueued(target)) {
    if (queueName !== undefined) {
      throw new WorkerConfigError(
        "a withStepQueues() flow selects its queue with stepSlug, not queueName",
      );
    }
    const steps = target.flow.stepOrder as readonly string[];
    if (typeof stepSlug !== "string" || !steps.includes(stepSlug)) {
      throw new WorkerConfigError(
        `stepSlug ${
          stepSlug === undefined ? "is missing" : `${JSON.stringify(stepSlug)} is not a step`
        }: flow "${target.slug}" has steps ${steps.map((s) => JSON.stringify(s)).join(", ")}`,
      );
    }
    const queues = target.queues as Readonly<Record<string, string>>;
    return { queue: queues[stepSlug], definitions: [target], flows: [target.flow] };
  }
  if (isFlow(target)) {
    if (queueName !== undefined || stepSlug !== undefined) {
      throw new WorkerConfigError(
        `flow "${target.slug}" is a plain flow and always polls its own queue; drop ` +
          `queueName/stepSlug, or route it with routeFlow() or withStepQueues()`,
      );
    }
    return { queue: flowQueueName(target.slug), definitions: [target], flows: [target] };
  }
  throw new WorkerConfigError(
    "a worker needs a Flow, withStepQueues(flow), routeFlow(flow, ...) or a list of routed flows",
  );
}

function rejectDuplicateSlugs(slugs: readonly string[]): void {
  const seen = new Map<string, string>();
  for (const slug of slugs) {
    const previous = seen.get(slug.toLowerCase());
    if (previous !== undefined) {
      throw new WorkerConfigError(
        `flow slug "${slug}" is supplied twice${previous === slug ? "" : ` (as "${previous}")`}; ` +
          `each concrete flow may appear once: give a new version a new slug`,
      );
    }
    seen.set(slug.toLowerCase(), slug);
  }
}
