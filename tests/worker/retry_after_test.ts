/**
 * Attempts that do not count toward maxAttempts, against a real database and worker: a handler's
 * RetryAfter defers its task by the delay asked (not the flow's backoff), a handler that always
 * defers ends at the cap, and a stopping worker interrupts its handlers without costing their
 * attempts. A step's timeout aborts ctx.signal and fails the attempt without waiting for stalled
 * recovery.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, RetryAfter, StepTimedOut, WorkerShutdown } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";
import { MAX_DEFERRALS, MAX_RETRY_AFTER_MS } from "../../src/dsl/retry_after.ts";

const db = testDatabase(import.meta.url);

interface AttemptRow {
  attempt: number;
  outcome: string;
  error_message: string | null;
  started_at: Date;
  ended_at: Date;
}

function attempts(sql: Parameters<typeof startRun>[0], run: string) {
  return sql<AttemptRow[]>`
    select attempt, outcome, error_message, started_at, ended_at from pgflow.task_attempts
    where run_id = ${run}::uuid order by attempt`;
}

async function taskRow(sql: Parameters<typeof startRun>[0], run: string) {
  const [row] = await sql<
    { status: string; attempts_count: number; uncounted_attempts: number; started_at: Date }[]
  >`
    select status, attempts_count, uncounted_attempts, started_at from pgflow.step_tasks
    where run_id = ${run}::uuid`;
  return row;
}

db.test("RetryAfter: retried after the delay asked, not the backoff, and the attempt does not count", async ({ sql, url }) => {
  let calls = 0;
  // maxAttempts 1: a deferral that counted would fail the run; baseDelay 300: a retry after the
  // backoff would come five minutes later.
  const flow = new Flow<{ n: number }>({ slug: "ra_defer", maxAttempts: 1, baseDelay: 300 }).step(
    { slug: "call" },
    (input) => {
      calls++;
      if (calls === 1) throw new RetryAfter({ afterMs: 2_500, reason: "HTTP 429" });
      return input.n;
    },
  );
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "ra_defer", { n: 7 });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    const [deferred, ...others] = await attempts(sql, run);
    assert.deepEqual(others, []);
    assert.equal(deferred.outcome, "deferred");
    assert.equal(deferred.attempt, 1);
    assert.equal(deferred.error_message, "retry after 3 s: HTTP 429");
    const task = await taskRow(sql, run);
    // Two claims, one of which counted: the handler saw attempt 2, maxAttempts saw 1.
    assert.deepEqual(
      [task.status, task.attempts_count, task.uncounted_attempts],
      ["completed", 2, 1],
    );
    // 2.5 s rounds up to 3 s: the message was hidden that long from the deferral on. (The
    // deferred row's ended_at is read after its set_vt, so allow the few microseconds between.)
    const waitedMs = task.started_at.getTime() - deferred.ended_at.getTime();
    assert.ok(waitedMs >= 2_990, `the retry came ${waitedMs} ms after the deferral`);
    assert.ok(waitedMs < 300_000, "not after the flow's backoff");
    const line = logs.find((l) => l.event === "task deferred");
    assert.equal(line?.fields.retryDelay, 3);
    assert.equal(logs.some((l) => l.event === "task failed"), false);
  } finally {
    await stopAll(workers);
  }
});

db.test("RetryAfter: a handler that always defers ends at the cap, with an error naming it", async ({ sql, url }) => {
  const flow = new Flow<Record<string, never>>({ slug: "ra_always", maxAttempts: 1 }).step(
    { slug: "call" },
    () => {
      throw new RetryAfter({ afterMs: 0 });
    },
  );
  const workers: FlowWorker[] = [];
  try {
    // Polling: nothing announces a message made visible again, and a listening worker would wait
    // for its fallback timer before each of the 101 claims.
    await startWorker(workers, flow, { connectionString: url, wakeups: "poll" });
    const run = await startRun(sql, "ra_always", {});
    const ended = await waitForRun(sql, run);
    assert.equal(ended.status, "failed");
    const rows = await attempts(sql, run);
    assert.equal(rows.filter((r) => r.outcome === "deferred").length, 100);
    const failed = rows.filter((r) => r.outcome === "failed");
    assert.equal(failed.length, 1);
    assert.equal(
      failed[0].error_message,
      "deferred 100 times, the most one task may be without it counting as a failed attempt; " +
        "retry after 0 s",
    );
    const task = await taskRow(sql, run);
    assert.deepEqual([task.attempts_count, task.uncounted_attempts], [101, 100]);
  } finally {
    await stopAll(workers);
  }
});

db.test("the bounds in TypeScript are SQL's", async ({ sql }) => {
  const [row] = await sql`
    select pgflow._max_uncounted('deferred') as deferrals, pgflow._max_retry_delay() as delay`;
  assert.deepEqual([row.deferrals, row.delay * 1000], [MAX_DEFERRALS, MAX_RETRY_AFTER_MS]);
});

db.test("fail_task refuses an unknown outcome and a retry delay out of range, naming them", async ({ sql }) => {
  const run = crypto.randomUUID();
  await assert.rejects(
    sql`select * from pgflow.fail_task(${run}::uuid, 's', 0, 'x', 1, outcome => 'later')`,
    /outcome must be failed, deferred or interrupted, not 'later'/,
  );
  await assert.rejects(
    sql`select * from pgflow.fail_task(${run}::uuid, 's', 0, 'x', 1, outcome => 'deferred',
                                       retry_delay => 86401)`,
    /retry_delay must be 0 to 86400 seconds, not 86401/,
  );
  await assert.rejects(
    sql`select * from pgflow.fail_task(${run}::uuid, 's', 0, 'x', 1, outcome => 'deferred')`,
    /a deferred attempt needs its retry_delay/,
  );
});

db.test("a step's timeout aborts ctx.signal with its reason and fails the attempt, though the handler ignores it", async ({ sql, url }) => {
  let reason: unknown;
  let release = () => {};
  const ignored = new Promise<void>((resolve) => release = resolve);
  const flow = new Flow<Record<string, never>>({ slug: "ra_timeout", maxAttempts: 1, timeout: 3 })
    .step({ slug: "slow" }, async (_input, ctx) => {
      ctx.signal.addEventListener("abort", () => reason = ctx.signal.reason);
      await ignored; // ignores the signal
      return "too late";
    });
  const workers: FlowWorker[] = [];
  try {
    const { worker } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "ra_timeout", {});
    const ended = await waitForRun(sql, run);
    assert.equal(ended.status, "failed");
    assert.ok(reason instanceof StepTimedOut, `reason: ${String(reason)}`);
    assert.deepEqual([reason.step, reason.timeoutSeconds, reason.attempt], [
      "ra_timeout.slow",
      3,
      1,
    ]);
    const [row, ...others] = await attempts(sql, run);
    assert.deepEqual(others, []);
    assert.equal(row.outcome, "failed");
    assert.equal(
      row.error_message,
      "step ra_timeout.slow timed out: attempt 1 ran past its timeout of 3 s",
    );
    // Failed by the worker once the timeout passed: not by stalled recovery (timeout + 30 s),
    // which this worker does not even run.
    assert.ok(row.ended_at.getTime() - row.started_at.getTime() >= 3_000);
    // The slot is free again although the handler still runs.
    assert.equal(worker.inFlight, 0);
  } finally {
    release();
    await stopAll(workers);
  }
});

db.test("a run with maxAttempts 2 survives three worker stops mid-handler; the handler sees the shutdown reason", async ({ sql, url }) => {
  let calls = 0;
  const reasons: unknown[] = [];
  const flow = new Flow<Record<string, never>>({ slug: "ra_stops", maxAttempts: 2 }).step(
    { slug: "work" },
    async (_input, ctx) => {
      calls++;
      if (calls > 3) return "done";
      // Honours the signal: ends with its reason once the worker stops.
      await new Promise<void>((resolve) =>
        ctx.signal.addEventListener("abort", () => resolve(), { once: true })
      );
      reasons.push(ctx.signal.reason);
      throw ctx.signal.reason;
    },
  );
  const workers: FlowWorker[] = [];
  let run = "";
  try {
    for (let stop = 1; stop <= 3; stop++) {
      const { worker } = await startWorker(workers, flow, { connectionString: url });
      if (stop === 1) run = await startRun(sql, "ra_stops", {});
      await waitFor(() => calls === stop, { what: `the handler to start (${stop})` });
      await worker.stop();
      assert.equal((await taskRow(sql, run)).status, "queued", `after stop ${stop}`);
    }
    await startWorker(workers, flow, { connectionString: url });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    assert.equal(reasons.length, 3);
    for (const reason of reasons) {
      assert.ok(reason instanceof WorkerShutdown, String(reason));
      assert.match(reason.message, /the worker is shutting down \(stop\(\) was called\)/);
    }
    const rows = await attempts(sql, run);
    assert.deepEqual(rows.map((r) => [r.attempt, r.outcome]), [
      [1, "interrupted"],
      [2, "interrupted"],
      [3, "interrupted"],
    ]);
    const task = await taskRow(sql, run);
    assert.deepEqual([task.attempts_count, task.uncounted_attempts], [4, 3]);
  } finally {
    await stopAll(workers);
  }
});

db.test("a stop whose handler ignores the signal past shutdownTimeoutMs still costs no attempt", async ({ sql, url }) => {
  let calls = 0;
  let release = () => {};
  const ignored = new Promise<void>((resolve) => release = resolve);
  const flow = new Flow<Record<string, never>>({ slug: "ra_deaf", maxAttempts: 1 }).step(
    { slug: "work" },
    async () => {
      calls++;
      if (calls > 1) return "done";
      await ignored;
      return "late";
    },
  );
  const workers: FlowWorker[] = [];
  try {
    const { worker, logs } = await startWorker(workers, flow, {
      connectionString: url,
      shutdownTimeoutMs: 300,
    });
    const run = await startRun(sql, "ra_deaf", {});
    await waitFor(() => calls === 1, { what: "the handler to start" });
    await worker.stop();
    assert.ok(logs.some((l) => l.event === "shutdown: task abandoned"));
    const [row] = await attempts(sql, run);
    assert.equal(row.outcome, "interrupted");
    assert.match(row.error_message!, /did not end within the shutdown timeout of 300 ms/);
    await startWorker(workers, flow, { connectionString: url });
    assert.equal((await waitForRun(sql, run)).status, "completed");
  } finally {
    release();
    await stopAll(workers);
  }
});

db.test("a task claimed as the platform unloads is not started, and queued again without costing an attempt", async ({ sql, url }) => {
  let calls = 0;
  const flow = new Flow<Record<string, never>>({ slug: "ra_unload", maxAttempts: 1 }).step(
    { slug: "work" },
    () => ++calls,
  );
  const workers: FlowWorker[] = [];
  try {
    // Polling in the database for up to 30 s: the read under way when the stop comes claims the
    // run started right after it.
    const { worker, logs } = await startWorker(workers, flow, {
      connectionString: url,
      wakeups: "poll",
      maxPollSeconds: 30,
    });
    await waitFor(
      async () =>
        (await sql`select 1 from pg_stat_activity where query ~ 'read_and_claim' and state = 'active'
                and pid <> pg_backend_pid()`)
          .length > 0,
      { what: "the worker's read to be under way" },
    );
    const stopped = worker.stop({ unloading: "WallClockTime" });
    const run = await startRun(sql, "ra_unload", {});
    await stopped;
    const line = logs.find((l) =>
      l.event === "tasks claimed as the platform unloaded were not started"
    );
    assert.equal(line?.fields.count, 1, "the read under way claimed the task");
    assert.equal(calls, 0);
    const [row] = await attempts(sql, run);
    assert.deepEqual([row.attempt, row.outcome, row.error_message], [
      1,
      "interrupted",
      "claimed as the platform began to unload; not started",
    ]);
    assert.equal((await taskRow(sql, run)).status, "queued");
    await startWorker(workers, flow, { connectionString: url });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    assert.equal(calls, 1);
  } finally {
    await stopAll(workers);
  }
});
