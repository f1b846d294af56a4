/**
 * Events from snapshots: what happened between two readings of a run. A notification only says
 * "look again"; comparing the run's statuses and timestamps with the previous reading says what
 * changed, so a late subscriber (previous reading: nothing), a lost notification or a reconnect
 * all end in the same events, none missed and none repeated.
 *
 * @module
 */
import type { RunEvent } from "./types.ts";
import { type AnyRunState, failedStep } from "./snapshot.ts";

type AnyEvent = RunEvent<never>;

/** Rank of an event among events with the same timestamp (one transaction: one `now()`). */
interface Ordered {
  readonly event: AnyEvent;
  readonly at: string;
  /** 0: run started; 1: a step's events (by step index, started before finished); 2: run ended. */
  readonly group: number;
  readonly index: number;
  readonly phase: number;
}

/**
 * The events that lead from `before` (undefined: nothing seen yet) to `after`, in the order they
 * happened: the run's start first and its end last (the end is recorded in the transaction of the
 * last step's end, whose `now()` can be earlier than a concurrent step's that committed first),
 * step events by time. Within one transaction every timestamp is equal; then steps go in
 * definition order (a step after its dependencies, so a completion comes before the start it
 * released), each step's start before its end.
 */
export function eventsBetween(before: AnyRunState | undefined, after: AnyRunState): AnyEvent[] {
  const found: Ordered[] = [];
  const runId = after.runId;
  if (before === undefined) {
    found.push({
      event: {
        type: "run:started",
        runId,
        at: after.startedAt,
        flowSlug: after.flowSlug,
        input: after.input,
      },
      at: after.startedAt,
      group: 0,
      index: 0,
      phase: 0,
    });
  }
  const seen = new Map(before?.steps.map((s) => [s.stepSlug, s]) ?? []);
  for (const step of after.steps) {
    const old = seen.get(step.stepSlug);
    const stepSlug = step.stepSlug;
    const add = (event: AnyEvent, at: string, phase: number) =>
      found.push({ event, at, group: 1, index: step.stepIndex, phase });
    if (step.startedAt !== null && old?.startedAt == null) {
      add({ type: "step:started", runId, stepSlug, at: step.startedAt }, step.startedAt, 0);
    }
    if (step.status === old?.status) continue;
    if (step.status === "completed" && step.completedAt !== null) {
      add(
        { type: "step:completed", runId, stepSlug, at: step.completedAt, output: step.output },
        step.completedAt,
        1,
      );
    } else if (step.status === "failed" && step.failedAt !== null) {
      add(
        { type: "step:failed", runId, stepSlug, at: step.failedAt, error: step.error ?? "" },
        step.failedAt,
        1,
      );
    } else if (step.status === "skipped" && step.skippedAt !== null) {
      add(
        {
          type: "step:skipped",
          runId,
          stepSlug,
          at: step.skippedAt,
          reason: step.skipReason ?? "",
        },
        step.skippedAt,
        1,
      );
    } else if (step.status === "cancelled" && step.cancelledAt !== null) {
      add({ type: "step:cancelled", runId, stepSlug, at: step.cancelledAt }, step.cancelledAt, 1);
    }
  }
  if (after.status !== before?.status) {
    if (after.status === "completed" && after.completedAt !== null) {
      found.push({
        event: {
          type: "run:completed",
          runId,
          at: after.completedAt,
          output: after.output as AnyRunState["output"] & object,
        },
        at: after.completedAt,
        group: 2,
        index: 0,
        phase: 0,
      });
    } else if (after.status === "failed" && after.failedAt !== null) {
      found.push({
        event: {
          type: "run:failed",
          runId,
          at: after.failedAt,
          error: after.error ?? "",
          stepSlug: failedStep(after)?.stepSlug ?? null,
        },
        at: after.failedAt,
        group: 2,
        index: 0,
        phase: 0,
      });
    } else if (after.status === "cancelled" && after.cancelledAt !== null) {
      found.push({
        event: {
          type: "run:cancelled",
          runId,
          at: after.cancelledAt,
          reason: after.cancelReason,
        },
        at: after.cancelledAt,
        group: 2,
        index: 0,
        phase: 0,
      });
    }
  }
  found.sort((a, b) =>
    a.group - b.group ||
    (a.at < b.at ? -1 : a.at > b.at ? 1 : a.index - b.index || a.phase - b.phase)
  );
  return found.map((o) => o.event);
}
