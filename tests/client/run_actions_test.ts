/**
 * Acting on runs from the client, against a real database with real workers: cancel (what it
 * answers, waitFor's RunCancelledError, the events, a late completion ignored), retry and resume
 * (typed handles of the new runs, lineage, reused steps, refusals), the attempt history in getRun
 * and RunFailedError, and listRuns with its filters and their checks.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import {
  ClientConfigError,
  createClient,
  RunActionError,
  RunCancelledError,
  type RunEvent,
  RunFailedError,
  RunFlowMismatchError,
  RunNotFoundError,
} from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, makeVisible, readAndStart, registerWorker } from "../support/engine.ts";
import { startWorker } from "../worker/helpers.ts";
import { flaky, flakyState, greet, slow, withClient } from "./fixtures.ts";

const db = testDatabase(import.meta.url);

function line(e: RunEvent): string {
  if (e.type === "run:cancelled") return `run:cancelled ${e.reason}`;
  return "stepSlug" in e ? `${e.type} ${e.stepSlug}` : e.type;
}

db.test("cancel ends a started run: waitFor rejects with RunCancelledError, events end with the cancellation, a late completion is ignored", async ({ url, sql }) => {
  await withClient(url, async (client, workers) => {
    const { worker } = await startWorker(workers, slow, { connectionString: url });
    // The handler naps long enough that the cancel comes first however busy the machine.
    const run = await client.startFlow(slow, { ms: 5_000 });
    const events: string[] = [];
    const watching = (async () => {
      for await (const e of run.events()) events.push(line(e));
    })();
    const pending = run.waitFor("completed", { timeoutMs: 60_000 }).then(
      () => assert.fail("a cancelled run cannot complete"),
      (e: unknown) => e,
    );
    await waitFor(async () => (await run.state()).steps[0].status === "started", {
      what: "the step to start",
    });
    const answer = await run.cancel("wrong input");
    assert.deepEqual(answer, {
      runId: run.runId,
      flowSlug: "cl_slow",
      status: "cancelled",
      cancelled: true,
    });
    const error = await pending;
    assert.ok(error instanceof RunCancelledError, String(error));
    assert.equal(error.runId, run.runId);
    assert.equal(error.status, "cancelled");
    assert.equal(error.reason, "wrong input");
    assert.match(error.cancelledAt ?? "", /^\d{4}-\d{2}-\d{2}T.*Z$/);
    assert.match(error.message, /was cancelled at .*: wrong input/);
    await watching;
    assert.deepEqual(events, [
      "run:started",
      "step:started nap",
      "step:cancelled nap",
      "run:cancelled wrong input",
    ]);
    // Idempotent: a second cancel says what the run is, and does not throw.
    assert.deepEqual(await run.cancel("again"), { ...answer, cancelled: false });
    // The handler finishes after the cancellation: its completion changes nothing.
    await waitFor(() => worker.inFlight === 0, { what: "the handler's late report" });
    const state = await run.waitFor("terminal");
    assert.equal(state.status, "cancelled");
    assert.equal(state.cancelReason, "wrong input");
    assert.equal(state.cancelledAt, error.cancelledAt);
    assert.equal(state.output, null);
    assert.deepEqual(state.steps.map((s) => [s.status, s.output, s.cancelledAt !== null]), [
      ["cancelled", null, true],
    ]);
    await assert.rejects(run.waitFor("failed"), RunCancelledError);
    const [row] = await sql`select status from pgflow.runs where run_id = ${run.runId}::uuid`;
    assert.equal(row.status, "cancelled");
  });
});

db.test("cancel of an ended run answers with its status; an unknown run or a handle of another flow is refused", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, greet, { connectionString: url });
    const done = await client.startFlow(greet, { name: "Ada" });
    await done.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual(await done.cancel(), {
      runId: done.runId,
      flowSlug: "cl_greet",
      status: "completed",
      cancelled: false,
    });
    assert.equal((await done.state()).status, "completed");
    await assert.rejects(client.run(crypto.randomUUID()).cancel(), RunNotFoundError);
    // A typed handle naming another flow does not act (a mistyped id is not cancelled).
    await assert.rejects(
      client.run(done.runId, "cl_slow").cancel(),
      (e: unknown) => e instanceof RunFlowMismatchError && e.flowSlug === "cl_greet",
    );
    await assert.rejects(client.run(done.runId).cancel(42 as never), /reason must be a string/);
  });
});

db.test("retry starts a new typed run with the same input and lineage; the source is unchanged; RunFailedError carries the attempts", async ({ url, sql }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, flaky, { connectionString: url });
    flakyState.secondFails = true;
    flakyState.firstCalls = 0;
    const run = await client.startFlow(flaky, { n: 20 });
    const error = await run.waitFor("completed", { timeoutMs: 60_000 }).then(
      () => assert.fail("the run should fail"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof RunFailedError, String(error));
    assert.equal(error.stepSlug, "second");
    assert.equal(error.attempts.length, 1, JSON.stringify(error.attempts));
    const [attempt] = error.attempts;
    assert.equal(attempt.taskIndex, 0);
    assert.equal(attempt.attempt, 1);
    assert.equal(attempt.outcome, "failed");
    assert.match(attempt.errorMessage ?? "", /the API is down/);
    assert.match(attempt.errorStack ?? "", /^Error: the API is down\n\s+at /);
    assert.match(attempt.workerId ?? "", /^[0-9a-f-]{36}$/);
    assert.ok(attempt.startedAt !== null && attempt.endedAt! >= attempt.startedAt);
    const source = await client.getRun(run.runId);
    assert.deepEqual(source?.steps.map((s) => s.attempts.length), [0, 1]);
    assert.deepEqual(source?.steps[1].attempts, error.attempts);

    flakyState.secondFails = false;
    const next = await run.retry();
    assert.notEqual(next.runId, run.runId);
    assert.equal(next.flowSlug, "cl_flaky");
    // The new handle is of the same flow type: its output is typed.
    const output: { second: number } = await next.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual(output, { second: 41 });
    assert.equal(flakyState.firstCalls, 2, "a retry runs every step again");
    const retried = await client.getRun<typeof flaky>(next.runId);
    assert.equal(retried?.restartOfRunId, run.runId);
    assert.equal(retried?.restartMode, "retry");
    assert.deepEqual(retried?.input, { n: 20 });
    assert.deepEqual(retried?.steps.map((s) => s.reused), [false, false]);
    const after = await client.getRun(run.runId);
    // Only its lineage says it was retried.
    assert.deepEqual({ ...after, restarts: [] }, source, "the source run is left as it was");
    assert.deepEqual(after?.restarts.map((r) => [r.runId, r.mode]), [[next.runId, "retry"]]);
    assert.equal(after?.restartOfRunId, null);
    assert.equal(after?.restartMode, null);
    // A retry's handle from an untyped handle knows its flow.
    const third = await client.run(run.runId).retry();
    assert.equal(third.flowSlug, "cl_flaky");
    await third.waitFor("completed", { timeoutMs: 60_000 });
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                              where restart_of_run_id = ${run.runId}::uuid`;
    assert.equal(n, 2);
  });
});

db.test("getRun lists every attempt that failed, with worker, times and stack; RunFailedError carries the failing step's", async ({ url, sql }) => {
  await withClient(url, async (client) => {
    await defineFlow(sql, "cl_history", [{ slug: "a" }], { maxAttempts: 2, baseDelay: 1 });
    const run = await client.startFlow("cl_history", {});
    const worker = await registerWorker(sql, "cl_history");
    for (const n of [1, 2]) {
      await makeVisible(sql, "cl_history");
      const [t] = await waitFor(
        () =>
          readAndStart(sql, "cl_history", worker, [["cl_history", "a"]]).then((r) =>
            r.length > 0 && r
          ),
        { what: `attempt ${n}` },
      );
      assert.equal(t.attempt, n);
      await sql`select pgflow.fail_task(${run.runId}::uuid, 'a', 0, ${`api down ${n}`}, ${n},
                                        ${`Error: api down ${n}
    at handler (h.ts:${n}:1)`})`;
    }
    const error = await run.waitFor("completed", { timeoutMs: 60_000 }).catch((e) => e);
    assert.ok(error instanceof RunFailedError, String(error));
    assert.deepEqual(
      error.attempts.map((
        a,
      ) => [a.taskIndex, a.attempt, a.outcome, a.workerId, a.errorMessage, a.errorStack]),
      [
        [0, 1, "failed", worker, "api down 1", "Error: api down 1\n    at handler (h.ts:1:1)"],
        [0, 2, "failed", worker, "api down 2", "Error: api down 2\n    at handler (h.ts:2:1)"],
      ],
    );
    for (const a of error.attempts) {
      assert.match(a.startedAt ?? "", /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      assert.ok(a.endedAt! >= a.startedAt!);
    }
    assert.deepEqual((await run.state()).steps[0].attempts, error.attempts);
  });
});

db.test("resume reuses what completed and runs only the rest; a started or unknown run is refused", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, flaky, { connectionString: url });
    await startWorker(workers, slow, { connectionString: url });
    flakyState.secondFails = true;
    flakyState.firstCalls = 0;
    const run = await client.startFlow(flaky, { n: 5 });
    await assert.rejects(run.waitFor("completed", { timeoutMs: 60_000 }), RunFailedError);
    assert.equal(flakyState.firstCalls, 1);
    flakyState.secondFails = false;
    const next = await run.resume();
    const output: { second: number } = await next.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual(output, { second: 11 });
    assert.equal(flakyState.firstCalls, 1, "first was reused, not run again");
    const resumed = await next.state();
    assert.equal(resumed.restartOfRunId, run.runId);
    assert.equal(resumed.restartMode, "resume");
    assert.deepEqual(
      resumed.steps.map((s) => [s.stepSlug, s.status, s.reused, s.output]),
      [["first", "completed", true, 10], ["second", "completed", false, 11]],
    );
    assert.equal((await run.state()).status, "failed", "the source is unchanged");

    const busy = await client.startFlow(slow, { ms: 3_000 });
    for (const action of ["retry", "resume"] as const) {
      await assert.rejects(
        busy[action](),
        (e: unknown) =>
          e instanceof RunActionError && e.action === action && e.code === "55000" &&
          e.status === "started" && e.runId === busy.runId &&
          /only failed or cancelled runs/.test(e.message),
      );
      await assert.rejects(client.run(crypto.randomUUID())[action](), RunNotFoundError);
    }
    // A completed run is not retried either.
    await assert.rejects(
      next.retry(),
      (e: unknown) => e instanceof RunActionError && e.status === "completed",
    );
    await busy.cancel("test over");
  });
});

db.test("listRuns filters by flow, status, since and id prefix, newest first; bad filters are ClientConfigErrors", async ({ url, sql }) => {
  await withClient(url, async (client) => {
    await sql`select pgflow.create_flow('cl_list_a')`;
    await sql`select pgflow.add_step('cl_list_a', 'x')`;
    await sql`select pgflow.create_flow('cl_list_b')`;
    await sql`select pgflow.add_step('cl_list_b', 'x')`;
    const before = new Date(Date.now() - 1_000);
    const a1 = await client.startFlow("cl_list_a", { i: 1 });
    const a2 = await client.startFlow("cl_list_a", { i: 2 });
    const b1 = await client.startFlow("cl_list_b", { i: 3 });
    await a1.cancel("not needed");
    const retried = await a1.retry();

    const ofA = await client.listRuns({ flow: "cl_list_a" });
    assert.deepEqual(ofA.map((r) => r.runId), [retried.runId, a2.runId, a1.runId]);
    const [newest] = ofA;
    assert.deepEqual(
      { ...newest, startedAt: typeof newest.startedAt },
      {
        runId: retried.runId,
        flowSlug: "cl_list_a",
        status: "started",
        startedAt: "string",
        completedAt: null,
        failedAt: null,
        cancelledAt: null,
        restartOfRunId: a1.runId,
        restartMode: "retry",
        startedAs: null,
        error: null,
        restarts: [],
      },
    );
    // The source names the run made from it; `restarted` selects on it.
    const [source] = await client.listRuns({ runIdPrefix: a1.runId });
    assert.deepEqual(
      source.restarts.map((r) => ({ ...r, startedAt: typeof r.startedAt })),
      [{ runId: retried.runId, mode: "retry", status: "started", startedAt: "string" }],
    );
    assert.deepEqual(
      (await client.listRuns({ flow: "cl_list_a", restarted: true })).map((r) => r.runId),
      [a1.runId],
    );
    assert.deepEqual(
      (await client.listRuns({ flow: "cl_list_a", restarted: false })).map((r) => r.runId),
      [retried.runId, a2.runId],
    );
    // { again: false } refuses a run restarted already, naming its restart; by default it goes.
    await assert.rejects(
      a1.resume({ again: false }),
      (e: unknown) =>
        e instanceof RunActionError && e.code === "23505" &&
        e.message.includes(`was retried already, as run ${retried.runId}`),
    );
    await assert.rejects(
      a1.retry({ again: "no" } as never),
      (e: unknown) =>
        e instanceof ClientConfigError &&
        /retry: again must be true or false, got "no"/.test(e.message),
    );
    const cancelled = await client.listRuns({ status: "cancelled", since: before });
    assert.deepEqual(cancelled.map((r) => [r.runId, r.status]), [[a1.runId, "cancelled"]]);
    assert.ok(cancelled[0].cancelledAt !== null);
    assert.deepEqual(
      (await client.listRuns({ runIdPrefix: b1.runId.slice(0, 13).toUpperCase() })).map((r) =>
        r.runId
      ),
      [b1.runId],
    );
    assert.equal((await client.listRuns({ since: before.toISOString(), limit: 2 })).length, 2);
    assert.deepEqual(await client.listRuns({ since: new Date(Date.now() + 3_600_000) }), []);
    assert.deepEqual(await client.listRuns({ flow: "cl_nothing" }), []);
    assert.ok((await client.listRuns()).length >= 4);

    for (
      const [options, message] of [
        [{ status: "done" }, /listRuns: status must be .*"cancelled", got "done"/],
        [{ limit: 0 }, /listRuns: limit must be an integer from 1 to 1000, got 0/],
        [{ limit: 1001 }, /got 1001/],
        [{ since: "yesterday" }, /listRuns: since "yesterday" is not an ISO time; pass a Date/],
        [{ since: new Date("nope") }, /since Invalid Date is not a time; pass a Date/],
        [{ runIdPrefix: "zz" }, /runIdPrefix must be the start of a run id .* got "zz"/],
        [{ flows: "x" }, /unknown option "flows"/],
        [{ restarted: "no" }, /listRuns: restarted must be true or false, got "no"/],
      ] as const
    ) {
      await assert.rejects(
        client.listRuns(options as never),
        (e: unknown) => e instanceof ClientConfigError && message.test(e.message),
        JSON.stringify(options),
      );
    }
    await assert.rejects(
      client.listRuns({ flow: 42 as never }),
      /listRuns: flow: 42 is not a flow/,
    );
    for (const run of [a2, b1, retried]) await run.cancel();
  });
});

db.test("service_role may cancel, retry, resume and list; authenticated gets RunActionError 42501 and nothing changes", async ({ sql, url }) => {
  await sql.unsafe(`do $$ begin
    if not exists (select 1 from pg_roles where rolname = 'authenticated') then
      create role authenticated nologin;
    end if;
  end $$`);
  await sql`select pgflow.create_flow('cl_roles')`;
  await sql`select pgflow.add_step('cl_roles', 'a')`;
  const asRole = (role: string) =>
    postgres(url, { max: 1, onnotice: () => {}, connection: { options: `-c role=${role}` } });
  const service = asRole("service_role");
  const user = asRole("authenticated");
  const serviceClient = createClient({ sql: service, transport: "poll" });
  const userClient = createClient({ sql: user, transport: "poll" });
  try {
    const run = await serviceClient.startFlow("cl_roles", {});
    for (const action of ["cancel", "retry", "resume"] as const) {
      await assert.rejects(
        userClient.run(run.runId)[action](),
        (e: unknown) => e instanceof RunActionError && e.code === "42501" && e.action === action,
      );
    }
    await assert.rejects(
      userClient.listRuns(),
      (e: unknown) => (e as { code?: string }).code === "42501",
    );
    const [before] = await sql`select status from pgflow.runs where run_id = ${run.runId}::uuid`;
    assert.equal(before.status, "started");
    assert.equal((await run.cancel("by service")).cancelled, true);
    const next = await run.retry();
    await next.cancel();
    await (await next.resume()).cancel();
    assert.deepEqual(
      (await serviceClient.listRuns({ flow: "cl_roles" })).map((r) => r.restartMode),
      ["resume", "retry", null],
    );
  } finally {
    await serviceClient.close();
    await userClient.close();
    await service.end();
    await user.end();
  }
});
