/**
 * What the task path makes per task, pinned: a task that writes no line at the logger's level
 * makes no child logger (a failing one still names its task), step deadlines share one timer yet
 * each fires on time (a sooner deadline tracked later included), and a finished task leaves no
 * timer or listener behind.
 */
import assert from "node:assert/strict";
import { createLogger, Flow, type FlowWorker, type Logger, type LogRecord } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";
import { RunCancellations } from "../../src/task/cancellations.ts";
import type { ClaimedTask } from "../../src/task/claim.ts";
import { StepTimedOut } from "../../mod.ts";

const db = testDatabase(import.meta.url);

/** `base`, counting every child logger made from it or its children in `made`. */
function counting(base: Logger, made: { count: number }): Logger {
  return {
    ...base,
    with: (fields) => {
      made.count++;
      return counting(base.with(fields), made);
    },
  };
}

db.test("a completed task makes no child logger at info; a failed one names its task", async ({ sql, url }) => {
  const flow = new Flow<{ fail: boolean }>({ slug: "tc_logs", maxAttempts: 1 })
    .step({ slug: "work" }, (input) => {
      if (input.fail) throw new Error("no");
      return null;
    });
  const made = { count: 0 };
  const logs: LogRecord[] = [];
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, {
      connectionString: url,
      logger: counting(createLogger({ level: "info", sink: (r) => logs.push(r) }), made),
    });
    const before = made.count;
    const runs = [];
    for (let i = 0; i < 20; i++) runs.push(await startRun(sql, "tc_logs", { fail: false }));
    for (const run of runs) assert.equal((await waitForRun(sql, run)).status, "completed");
    assert.equal(made.count, before, "20 completed tasks, no child logger");

    const bad = await startRun(sql, "tc_logs", { fail: true });
    assert.equal((await waitForRun(sql, bad)).status, "failed");
    const failed = await waitFor(() => logs.find((l) => l.event === "task failed"), {
      what: "the failure's line",
    });
    assert.equal(failed.level, "error");
    assert.deepEqual(
      [failed.fields.runId, failed.fields.flow, failed.fields.step, failed.fields.attempt],
      [bad, "tc_logs", "work", 1],
    );
    assert.equal(made.count, before + 1, "one child logger, for the task that logged");
  } finally {
    await stopAll(workers);
  }
});

function claimed(runId: string, stepSlug: string): ClaimedTask {
  return {
    flowSlug: "tc_deadlines",
    stepSlug,
    runId,
    taskIndex: 0,
    attempt: 1,
    messageId: "1",
    input: null,
  } as unknown as ClaimedTask;
}

/** The task tracking of a worker whose shutdown is `shutdown`, on the test's database. */
function tracker(sql: Parameters<typeof startRun>[0], shutdown: AbortSignal): RunCancellations {
  return new RunCancellations(sql, createLogger({ level: "error" }), 5_000, shutdown);
}

db.test("step deadlines share one timer: a sooner one tracked later fires first, each on time", async ({ sql }) => {
  const shutdown = new AbortController();
  const cancellations = tracker(sql, shutdown.signal);
  const t0 = performance.now();
  const slow = cancellations.track(claimed(crypto.randomUUID(), "slow"), 2);
  const quick = cancellations.track(claimed(crypto.randomUUID(), "quick"), 0.2);
  const spared = cancellations.track(claimed(crypto.randomUUID(), "spared"), 0.4);
  const untimed = cancellations.track(claimed(crypto.randomUUID(), "untimed"));
  const abortedAt = new Map<string, number>();
  for (const [name, t] of [["slow", slow], ["quick", quick], ["spared", spared]] as const) {
    t.signal.addEventListener("abort", () => abortedAt.set(name, performance.now() - t0));
  }
  const heard: string[] = [];
  quick.onTimeout((reason) => heard.push(reason.step));
  await waitFor(() => quick.signal.aborted, { what: "the sooner deadline" });
  assert.ok(!slow.signal.aborted, "the later deadline has not fired with the sooner one");
  assert.ok(quick.signal.reason instanceof StepTimedOut);
  assert.deepEqual(heard, ["tc_deadlines.quick"]);
  // Done before its deadline: never aborted.
  cancellations.done(spared);
  await waitFor(() => slow.signal.aborted, { what: "the later deadline" });
  assert.ok(slow.signal.reason instanceof StepTimedOut);
  assert.equal((slow.signal.reason as StepTimedOut).timeoutSeconds, 2);
  // Not early: each at or after its own timeout (a busy machine may make it later, never sooner).
  assert.ok(abortedAt.get("quick")! >= 200, `quick at ${abortedAt.get("quick")} ms`);
  assert.ok(abortedAt.get("slow")! >= 2_000, `slow at ${abortedAt.get("slow")} ms`);
  assert.ok(!abortedAt.has("spared"));
  assert.ok(!untimed.signal.aborted);
  // A timeout heard after it passed is told at once.
  const late: string[] = [];
  slow.onTimeout((reason) => late.push(reason.step));
  assert.deepEqual(late, ["tc_deadlines.slow"]);
  assert.deepEqual(cancellations.tasks().map((t) => t.stepSlug).sort(), [
    "quick",
    "slow",
    "untimed",
  ]);
  // Shutdown reaches every task still tracked, through one listener.
  shutdown.abort(new Error("stopping"));
  assert.ok(untimed.signal.aborted);
  for (const t of [slow, quick, untimed]) cancellations.done(t);
  assert.deepEqual(cancellations.tasks(), []);
  // The test's sanitizers fail it if a timer of the sweep were still pending here.
});

db.test("a deadline passing after a shutdown abort is not heard as a timeout", async ({ sql }) => {
  const shutdown = new AbortController();
  const cancellations = tracker(sql, shutdown.signal);
  const t = cancellations.track(claimed(crypto.randomUUID(), "stopping"), 0.1);
  const heard: string[] = [];
  t.onTimeout((reason) => heard.push(reason.step));
  shutdown.abort(new Error("stopping"));
  const other = cancellations.track(claimed(crypto.randomUUID(), "other"), 0.3);
  assert.ok(other.signal.aborted, "tracked after the shutdown: aborted at once");
  // Past both deadlines: the shutdown's reason stands and no timeout reached the race.
  await new Promise((r) => setTimeout(r, 400));
  assert.equal((t.signal.reason as Error).message, "stopping");
  assert.deepEqual(heard, []);
  cancellations.done(t);
  cancellations.done(other);
});

db.test("a task tracked after shutdown began is aborted at once", async ({ sql }) => {
  const shutdown = new AbortController();
  shutdown.abort(new Error("stopping"));
  const cancellations = tracker(sql, shutdown.signal);
  const t = cancellations.track(claimed(crypto.randomUUID(), "late"), 60);
  assert.ok(t.signal.aborted);
  // A check of its run (not cancelled: it does not exist) changes nothing.
  await cancellations.check();
  assert.equal((t.signal.reason as Error).message, "stopping");
  cancellations.done(t);
  assert.deepEqual(cancellations.tasks(), []);
});
