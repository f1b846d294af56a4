/**
 * Events from readings (src/client/diff.ts), without a database: the order within one
 * transaction (equal timestamps), the run's end last even when a concurrent step's transaction
 * has a later now(), nothing repeated across readings, and what a late subscriber gets.
 */
import assert from "node:assert/strict";
import { eventsBetween } from "../../src/client/diff.ts";
import type { AnyRunState } from "../../src/client/snapshot.ts";

const T = (n: number) => `2026-12-03T08:00:00.${String(n).padStart(6, "0")}Z`;

function step(slug: string, index: number, fields: Partial<AnyRunState["steps"][number]>) {
  return {
    stepSlug: slug,
    stepIndex: index,
    stepType: "single" as const,
    status: "created" as const,
    output: null,
    error: null,
    skipReason: null,
    initialTasks: null,
    remainingTasks: null,
    startedAt: null,
    completedAt: null,
    failedAt: null,
    skippedAt: null,
    cancelledAt: null,
    reused: false,
    attempts: [],
    ...fields,
  } as AnyRunState["steps"][number];
}

function run(
  status: AnyRunState["status"],
  steps: AnyRunState["steps"],
  end?: string,
): AnyRunState {
  return {
    runId: "r",
    flowSlug: "f",
    status,
    input: { n: 1 },
    output: status === "completed" ? { c: 3 } : null,
    error: status === "failed" ? "boom" : null,
    remainingSteps: 0,
    startedAt: T(1),
    completedAt: status === "completed" ? end ?? null : null,
    failedAt: status === "failed" ? end ?? null : null,
    cancelledAt: status === "cancelled" ? end ?? null : null,
    cancelReason: status === "cancelled" ? "wrong input" : null,
    restartOfRunId: null,
    restartMode: null,
    startedAs: null,
    restarts: [],
    parent: null,
    steps,
  };
}

const names = (events: ReturnType<typeof eventsBetween>) =>
  events.map((e) => ("stepSlug" in e && e.stepSlug ? `${e.type} ${e.stepSlug}` : e.type));

Deno.test("within one transaction: completions before the starts they release, in step order", () => {
  const first = run("started", [
    step("a", 0, { status: "started", startedAt: T(1) }),
    step("b", 1, {}),
    step("c", 2, {}),
  ]);
  assert.deepEqual(names(eventsBetween(undefined, first)), ["run:started", "step:started a"]);
  // a completes; b is skipped and c starts in the same transaction (one timestamp).
  const second = run("started", [
    step("a", 0, { status: "completed", startedAt: T(1), completedAt: T(5) }),
    step("b", 1, { status: "skipped", skippedAt: T(5), skipReason: "condition_unmet" }),
    step("c", 2, { status: "started", startedAt: T(5) }),
  ]);
  assert.deepEqual(names(eventsBetween(first, second)), [
    "step:completed a",
    "step:skipped b",
    "step:started c",
  ]);
  assert.deepEqual(eventsBetween(second, second), [], "the same reading twice: no event");
});

Deno.test("the run's end comes last even when its transaction's now() is earlier", () => {
  const before = run("started", [
    step("a", 0, { status: "started", startedAt: T(1) }),
    step("b", 1, { status: "started", startedAt: T(1) }),
  ]);
  // b's transaction started later (T9) but committed first; a's (T7) completed the run.
  const after = run("completed", [
    step("a", 0, { status: "completed", startedAt: T(1), completedAt: T(7) }),
    step("b", 1, { status: "completed", startedAt: T(1), completedAt: T(9) }),
  ], T(7));
  assert.deepEqual(names(eventsBetween(before, after)), [
    "step:completed a",
    "step:completed b",
    "run:completed",
  ]);
});

Deno.test("a late subscriber gets every event so far, in order, from one reading", () => {
  const failed = run("failed", [
    step("a", 0, { status: "completed", startedAt: T(1), completedAt: T(3), output: 1 }),
    step("b", 1, { status: "failed", startedAt: T(3), failedAt: T(6), error: "boom" }),
    step("c", 2, {}),
  ], T(6));
  const events = eventsBetween(undefined, failed);
  assert.deepEqual(names(events), [
    "run:started",
    "step:started a",
    "step:completed a",
    "step:started b",
    "step:failed b",
    "run:failed b",
  ]);
  assert.deepEqual(events.at(-1), {
    type: "run:failed",
    runId: "r",
    at: T(6),
    error: "boom",
    stepSlug: "b",
  });
});

Deno.test("a cancellation: step:cancelled for each unfinished step, then run:cancelled with the reason, last", () => {
  const before = run("started", [
    step("a", 0, { status: "completed", startedAt: T(1), completedAt: T(2) }),
    step("b", 1, { status: "started", startedAt: T(2) }),
    step("c", 2, {}),
  ]);
  const after = run("cancelled", [
    step("a", 0, { status: "completed", startedAt: T(1), completedAt: T(2) }),
    step("b", 1, { status: "cancelled", startedAt: T(2), cancelledAt: T(5) }),
    step("c", 2, { status: "cancelled", cancelledAt: T(5) }),
  ], T(5));
  const events = eventsBetween(before, after);
  assert.deepEqual(names(events), ["step:cancelled b", "step:cancelled c", "run:cancelled"]);
  assert.deepEqual(events.at(-1), {
    type: "run:cancelled",
    runId: "r",
    at: T(5),
    reason: "wrong input",
  });
  assert.deepEqual(events.map((e) => e.at), [T(5), T(5), T(5)]);
  // Read again: nothing new. A late subscriber: everything, the cancellation last.
  assert.deepEqual(eventsBetween(after, after), []);
  assert.deepEqual(names(eventsBetween(undefined, after)), [
    "run:started",
    "step:started a",
    "step:completed a",
    "step:started b",
    "step:cancelled b",
    "step:cancelled c",
    "run:cancelled",
  ]);
});
