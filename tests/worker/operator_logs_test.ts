/**
 * What an operator reads in a worker's log (docs/operations.md, "Logs"): every task line names its
 * run; a success is a `debug` line and the interval's summary counts it at `info`; a failed
 * attempt is `warn` while a retry follows and `error` on the last, with the error's message and
 * never the input; unclaimed messages are reported once per (disposition, flow, step) per interval
 * with a count and what to do; options changed under an existing slug are a `warn` each.
 */
import assert from "node:assert/strict";
import { createLogger, Flow, type FlowWorker, type LogRecord, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { tableRows } from "../docs/markdown.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const SECRET_INPUT = "ssn-078-05-1120";

/** docs/operations.md's tables of events and fields. */
const OPERATIONS = Deno.readTextFileSync(new URL("../../docs/operations.md", import.meta.url));
const DOCUMENTED_FIELDS = new Set(tableRows(OPERATIONS, "field").map((r) => r[0]));
const DOCUMENTED_EVENTS = tableRows(OPERATIONS, "event").map((r) => r[0]);

/** Every line of a documented event carries only documented fields, at the documented level. */
function assertDocumented(logs: readonly LogRecord[]): void {
  for (const line of logs) {
    const event = DOCUMENTED_EVENTS.find((e) =>
      e === line.event || (e.includes("<") && line.event.startsWith(e.slice(0, e.indexOf("<"))))
    );
    if (event === undefined) continue;
    for (const key of Object.keys(line.fields)) {
      assert.ok(DOCUMENTED_FIELDS.has(key), `field ${key} of "${line.event}" is in operations.md`);
    }
    const level = tableRows(OPERATIONS, "event").find((r) => r[0] === event)![1];
    assert.ok(level.includes(line.level), `"${line.event}" at ${line.level}: documented ${level}`);
  }
}

db.test("task lines carry runId; success is debug, a retried failure warn, the last error", async ({ sql, url }) => {
  let calls = 0;
  const flow = new Flow<{ mode: string; secret: string }>({
    slug: "ol_tasks",
    maxAttempts: 2,
    baseDelay: 1,
  }).step({ slug: "work" }, (input) => {
    calls++;
    if (input.mode === "fail") throw new Error(`upstream said no (call ${calls})\n    at stack`);
    return { ok: input.secret.length };
  });
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, {
      connectionString: url,
      logSummaryIntervalMs: 300,
      // The handler's text is logged only when asked for (error_text_test.ts has the default).
      logErrorMessages: true,
    });
    const good = await startRun(sql, "ol_tasks", { mode: "ok", secret: SECRET_INPUT });
    const bad = await startRun(sql, "ol_tasks", { mode: "fail", secret: SECRET_INPUT });
    assert.equal((await waitForRun(sql, good)).status, "completed");
    assert.equal((await waitForRun(sql, bad)).status, "failed");
    await waitFor(() => logs.some((l) => l.event === "worker summary" && l.fields.failed === 1), {
      what: "a summary that counts the failure",
    });

    // Every line about a task names its run.
    const taskLines = logs.filter((l) => l.fields.messageId !== undefined);
    assert.ok(taskLines.length >= 5);
    for (const line of taskLines) {
      assert.ok(
        line.fields.runId === good || line.fields.runId === bad,
        `${line.event} names its run`,
      );
    }
    const done = logs.filter((l) => l.event === "task completed");
    assert.deepEqual(done.map((l) => [l.level, l.fields.runId]), [["debug", good]]);

    const failed = logs.filter((l) => l.event === "task failed");
    assert.deepEqual(
      failed.map((l) => [l.level, l.fields.runId, l.fields.attempt, l.fields.outcome]),
      [["warn", bad, 1, "retried"], ["error", bad, 2, "failed"]],
    );
    assert.match(String(failed[0].fields.error), /^upstream said no \(call \d\)$/);
    assert.equal(failed[1].fields.errorKind, "Error");
    // The input (and output) are never in a line.
    assert.ok(!JSON.stringify(logs).includes(SECRET_INPUT), "the input is never logged");

    // The summaries add up to what happened, with handler percentiles.
    const summaries = logs.filter((l) => l.event === "worker summary");
    assert.ok(summaries.every((l) => l.level === "info"));
    const sum = (key: string) => summaries.reduce((n, l) => n + Number(l.fields[key]), 0);
    assert.deepEqual([sum("completed"), sum("failed"), sum("retried")], [1, 1, 1]);
    for (const s of summaries) {
      assert.equal(typeof s.fields.p50Ms, "number");
      assert.ok(Number(s.fields.p95Ms) >= Number(s.fields.p50Ms));
    }
    // Nothing at info or above per successful task: at info a busy worker logs only summaries.
    assert.deepEqual(
      logs.filter((l) => l.level === "info" && l.fields.messageId !== undefined),
      [],
    );
    assertDocumented(logs);
  } finally {
    await stopAll(workers);
  }
});

db.test("unclaimed messages: one line per disposition, flow and step per interval, with a count", async ({ sql, url }) => {
  const served = new Flow<{ n: number }>({ slug: "ol_served" })
    .step({ slug: "a" }, (input) => input.n);
  const other = new Flow<{ n: number }>({ slug: "ol_other" })
    .step({ slug: "b" }, (input) => input.n);
  // ol_other's route exists (another deployment compiled it) but no worker here has its handler.
  await compileFlow(sql, routeFlow(other, { queues: { b: "ol_q" } }));
  for (let i = 0; i < 3; i++) await startRun(sql, "ol_other", { n: i });
  await sql`select pgmq.send('ol_q', '{"not": "a pgflow message"}'::jsonb)`;

  const intervalMs = 1_500;
  const workers: FlowWorker[] = [];
  try {
    // Each record with when it was logged (not when the test looked: a busy machine may delay a
    // look past two reports).
    const stamped: { at: number; record: LogRecord }[] = [];
    let watching = false;
    const logger = createLogger({
      level: "debug",
      sink: (record) => watching && stamped.push({ at: performance.now(), record }),
    });
    await startWorker(workers, [routeFlow(served, { queues: { a: "ol_q" } })], {
      queueName: "ol_q",
      connectionString: url,
      visibilityTimeout: 1,
      logSummaryIntervalMs: intervalMs,
      logger,
    });
    watching = true;
    // Three intervals, in which each message is read two or three times.
    await waitFor(
      () =>
        stamped.filter((s) => s.record.event === "messages not claimed (unsupported)").length >= 3,
      { what: "three reports of the unsupported messages" },
    );

    const unsupported = stamped.filter((s) =>
      s.record.event === "messages not claimed (unsupported)"
    );
    for (const { record } of unsupported) {
      assert.equal(record.level, "warn");
      assert.equal(record.fields.flow, "ol_other");
      assert.equal(record.fields.step, "b");
      assert.equal(record.fields.queue, "ol_q");
      // The same three messages each time they come back: a count, not a line each.
      assert.equal(Number(record.fields.count) % 3, 0, `count ${record.fields.count}`);
      assert.match(
        String(record.fields.action),
        /no live worker on this queue serves .*: deploy \(or start\) one/,
      );
      assert.equal(record.fields.servedBy, "none", "no live worker serves ol_other.b");
    }
    // Once per interval: consecutive reports of one key are an interval apart.
    for (let i = 1; i < unsupported.length; i++) {
      assert.ok(unsupported[i].at - unsupported[i - 1].at >= intervalMs * 0.8);
    }
    const unknown = stamped.filter((s) => s.record.event === "messages not claimed (unknown)");
    assert.ok(unknown.length >= 2);
    for (const { record } of unknown) {
      assert.ok(Number(record.fields.count) >= 1);
      assert.equal(record.fields.flow, undefined);
      assert.match(String(record.fields.action), /no pgflow task owns these messages/);
    }
    // The per-message detail is debug only, and names the owning task.
    const detail = stamped.filter((s) => s.record.event === "message not claimed (unsupported)");
    assert.ok(detail.length >= 3);
    assert.ok(detail.every((s) => s.record.level === "debug" && s.record.fields.step === "b"));
    assert.ok(!JSON.stringify(stamped).includes("a pgflow message"), "no body is logged");
    assertDocumented(stamped.map((s) => s.record));
  } finally {
    await stopAll(workers);
  }
});

db.test("options changed under an existing slug: a warn for each, and the stored ones apply", async ({ sql, url }) => {
  const v1 = new Flow<{ n: number }>({ slug: "ol_opts", maxAttempts: 3 })
    .step({ slug: "a", timeout: 30 }, (input) => input.n)
    .step({ slug: "b", dependsOn: ["a"] }, (deps) => deps.a);
  const edited = new Flow<{ n: number }>({ slug: "ol_opts", maxAttempts: 5 })
    .step({ slug: "a", timeout: 30 }, (input) => input.n)
    .step({ slug: "b", dependsOn: ["a"], startDelay: 2, baseDelay: 4 }, (deps) => deps.a);
  const workers: FlowWorker[] = [];
  try {
    const first = await startWorker(workers, v1, { connectionString: url });
    assert.deepEqual(first.logs.filter((l) => l.level === "warn"), []);
    const second = await startWorker(workers, edited, { connectionString: url });
    const compiled = second.logs.find((l) => l.event === "flow compiled")!;
    assert.equal(compiled.fields.status, "verified");
    const drift = second.logs.filter((l) =>
      l.event === "flow option differs from the stored one; the stored value applies"
    );
    assert.deepEqual(
      drift.map((
        l,
      ) => [l.level, l.fields.step, l.fields.option, l.fields.stored, l.fields.supplied]),
      [
        ["warn", undefined, "maxAttempts", 3, 5],
        ["warn", "b", "baseDelay", null, 4],
        ["warn", "b", "startDelay", 0, 2],
      ],
    );
    assert.match(String(drift[0].fields.action), /deploy the change as a new flow slug/);
    const [stored] = await sql`select f.opt_max_attempts, s.opt_start_delay, s.opt_base_delay
      from pgflow.flows f join pgflow.steps s using (flow_slug)
      where f.flow_slug = 'ol_opts' and s.step_slug = 'b'`;
    assert.deepEqual({ ...stored }, {
      opt_max_attempts: 3,
      opt_start_delay: 0,
      opt_base_delay: null,
    });
  } finally {
    await stopAll(workers);
  }
});

db.test("a flow recompiled in local development: a warn with what was deleted, and its old workers stop claiming it", async ({ sql, url }) => {
  const v1 = new Flow<{ n: number }>({ slug: "ol_recompile" })
    .step({ slug: "a" }, () => ({ v: 1 }));
  const edited = new Flow<{ n: number }>({ slug: "ol_recompile" })
    .step({ slug: "a" }, () => ({ v: 2 }))
    .step({ slug: "b", dependsOn: ["a"] }, (deps) => deps.a);
  const oldWorkers: FlowWorker[] = [];
  const newWorkers: FlowWorker[] = [];
  try {
    const old = await startWorker(oldWorkers, v1, {
      connectionString: url,
      logSummaryIntervalMs: 200,
      visibilityTimeout: 1,
    });
    for (let i = 0; i < 2; i++) {
      assert.equal(
        (await waitForRun(sql, await startRun(sql, "ol_recompile", { n: i }))).status,
        "completed",
      );
    }
    await sql`select pgflow.set_local_development(true)`;
    const fresh = await startWorker(newWorkers, edited, { connectionString: url });
    const line = fresh.logs.find((l) => l.event === "flow recompiled: its runs were deleted");
    assert.ok(line, "a warn, not the info line `flow compiled`");
    assert.equal(line.level, "warn");
    assert.deepEqual(
      [line.fields.deletedRuns, line.fields.deletedTasks, line.fields.withdrawnWorkers],
      [2, 2, 1],
    );
    assert.match(
      String(line.fields.action),
      /deleted its 2 run\(s\) and 2 task\(s\).*restart them/,
    );
    assertDocumented(fresh.logs);
    await stopAll(newWorkers);
    newWorkers.length = 0;

    // Only the old worker reads now: it has a handler for a, but no longer claims it.
    const runId = await startRun(sql, "ol_recompile", { n: 9 });
    const seen = await waitFor(
      () => old.logs.find((l) => l.event === "messages not claimed (withdrawn)"),
      { what: "the old worker's report of the withdrawn pair" },
    );
    assert.equal(seen.level, "warn");
    assert.deepEqual([seen.fields.flow, seen.fields.step], ["ol_recompile", "a"]);
    assert.match(String(seen.fields.action), /recompiled .* restart it/);
    assertDocumented(old.logs);
    const [task] = await sql`select status, attempts_count from pgflow.step_tasks
                             where run_id = ${runId}::uuid and step_slug = 'a'`;
    assert.deepEqual(
      { ...task },
      { status: "queued", attempts_count: 0 },
      "never claimed by old handlers",
    );

    // A worker of the new definition runs it with the new handlers (the old one stopped, as a
    // restart would: a non-supporting reader delaying a claim is another matter).
    await stopAll(oldWorkers);
    await startWorker(newWorkers, edited, { connectionString: url });
    const done = await waitForRun(sql, runId);
    assert.deepEqual(done, { status: "completed", output: { b: { v: 2 } } });
  } finally {
    await sql`select pgflow.set_local_development(false)`;
    await stopAll([...oldWorkers, ...newWorkers]);
  }
});
