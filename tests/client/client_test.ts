/**
 * The client against a real database with real workers, over a direct connection (LISTEN):
 * starting (idempotently), waiting (completed, failed, timeout), reading runs, and the events of a
 * map flow and of a conditional skip, for a subscriber from the start and for a late one.
 */
import assert from "node:assert/strict";
import {
  createClient,
  Flow,
  type FlowWorker,
  type RunEvent,
  RunFailedError,
  RunNotFoundError,
  RunStatusError,
  RunTimeoutError,
  StartFlowError,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { conditional, failing, greet, withClient, words } from "./fixtures.ts";

const db = testDatabase(import.meta.url);

/** What an event says, as one line. */
function line(e: RunEvent): string {
  switch (e.type) {
    case "run:started":
      return `run:started ${JSON.stringify(e.input)}`;
    case "run:completed":
      return `run:completed ${JSON.stringify(e.output)}`;
    case "run:failed":
      return `run:failed ${e.stepSlug}: ${e.error}`;
    case "step:completed":
      return `step:completed ${e.stepSlug} ${JSON.stringify(e.output)}`;
    case "step:failed":
      return `step:failed ${e.stepSlug}: ${e.error}`;
    case "step:skipped":
      return `step:skipped ${e.stepSlug} ${e.reason}`;
    case "run:cancelled":
      return `run:cancelled ${e.reason}`;
    default:
      return `${e.type} ${e.stepSlug}`;
  }
}

async function collect(events: AsyncIterable<RunEvent>): Promise<string[]> {
  const lines: string[] = [];
  for await (const e of events) lines.push(line(e));
  return lines;
}

db.test("startFlow runs a flow and waitFor resolves with its output; getRun reads the whole run", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, greet, { connectionString: url });
    assert.equal(await client.transport(), "listen");
    const run = await client.startFlow(greet, { name: "Ada" });
    assert.equal(run.flowSlug, "cl_greet");
    const output = await run.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual(output, { hello: { text: "hello Ada" } });
    const state = await client.getRun(run.runId);
    assert.ok(state);
    assert.equal(state.status, "completed");
    assert.deepEqual(state.input, { name: "Ada" });
    assert.deepEqual(state.output, { hello: { text: "hello Ada" } });
    assert.deepEqual(
      state.steps.map((s) => [s.stepSlug, s.status, s.output]),
      [["hello", "completed", { text: "hello Ada" }]],
    );
    assert.ok(state.completedAt! >= state.startedAt);
    assert.equal(await client.getRun(crypto.randomUUID()), null);
    // waitFor on a run that completed already answers at once.
    assert.deepEqual(await run.waitFor("terminal").then((s) => s.status), "completed");
    await assert.rejects(run.waitFor("failed"), RunStatusError);
  });
});

db.test("a runId makes startFlow idempotent: the same id twice is one run", async ({ url, sql }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, greet, { connectionString: url });
    const runId = crypto.randomUUID();
    const [a, b] = await Promise.all([
      client.startFlow(greet, { name: "once" }, { runId }),
      client.startFlow(greet, { name: "once" }, { runId }),
    ]);
    const c = await client.startFlow(greet, { name: "once" }, { runId });
    assert.deepEqual([a.runId, b.runId, c.runId], [runId, runId, runId]);
    await c.waitFor("completed", { timeoutMs: 60_000 });
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs where run_id = ${runId}`;
    assert.equal(n, 1);
    const [{ tasks }] =
      await sql`select count(*)::int as tasks from pgflow.step_tasks where run_id = ${runId}`;
    assert.equal(tasks, 1, "the step ran once");
    // The same id for another flow is refused, naming both.
    await sql`select pgflow.create_flow('cl_other')`;
    await assert.rejects(
      client.startFlow("cl_other", {}, { runId }),
      (e: unknown) =>
        e instanceof StartFlowError &&
        /exists already and is a run of flow cl_greet/.test(e.message),
    );
  });
});

db.test("startFlow refuses an unknown flow, a bad runId and undefined input with clear errors", async ({ url }) => {
  await withClient(url, async (client) => {
    await assert.rejects(
      client.startFlow("cl_nope", {}),
      (e: unknown) =>
        e instanceof StartFlowError && e.code === "22023" && /cl_nope/.test(e.message) &&
        /start a worker for the flow/.test(e.message),
    );
    await assert.rejects(
      client.startFlow(greet, { name: "x" }, { runId: "run-1" }),
      /runId "run-1" is not a UUID/,
    );
    await assert.rejects(
      client.startFlow("cl_greet", undefined as never),
      /input is undefined; pass a JSON value/,
    );
    await assert.rejects(client.run(crypto.randomUUID()).waitFor("completed"), RunNotFoundError);
  });
});

db.test("waitFor rejects with RunFailedError naming the run, its status and the failing step's error", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, failing, { connectionString: url });
    const run = await client.startFlow(failing, { id: 7 });
    const error = await run.waitFor("completed", { timeoutMs: 60_000 }).then(
      () => assert.fail("the run should fail"),
      (e: unknown) => e,
    );
    assert.ok(error instanceof RunFailedError, String(error));
    assert.equal(error.runId, run.runId);
    assert.equal(error.status, "failed");
    assert.equal(error.stepSlug, "explode");
    assert.match(error.stepError, /the disk is on fire/);
    assert.match(
      error.message,
      new RegExp(`run ${run.runId} failed at step explode: .*disk is on fire`),
    );
    const state = await run.waitFor("failed");
    assert.equal(state.status, "failed");
    assert.deepEqual(
      await collect(run.events()),
      [
        `run:started {"id":7}`,
        "step:started check",
        "step:completed check 7",
        "step:started explode",
        `step:failed explode: ${state.steps[1].error}`,
        `run:failed explode: ${state.error}`,
      ],
    );
  });
});

db.test("waitFor rejects with RunTimeoutError when the run is still going, and the run goes on", async ({ url }) => {
  // The step waits for the test: the run is still going when the timeout fires, however busy the
  // machine, and the timeout leaves the client time to have read the run at least once.
  let release!: () => void;
  const released = new Promise<void>((resolve) => (release = resolve));
  const gated = new Flow<{ n: number }>({ slug: "cl_gated" }).step({ slug: "held" }, async (i) => {
    await released;
    return i.n;
  });
  await withClient(url, async (client, workers) => {
    try {
      await startWorker(workers, gated, { connectionString: url });
      const run = await client.startFlow(gated, { n: 7 });
      const started = Date.now();
      const error = await run.waitFor("completed", { timeoutMs: 3_000 }).then(
        () => assert.fail("the run should not be done yet"),
        (e: unknown) => e,
      );
      const waited = Date.now() - started;
      assert.ok(error instanceof RunTimeoutError, String(error));
      assert.equal(error.runId, run.runId);
      assert.equal(error.status, "started");
      assert.equal(error.timeoutMs, 3_000);
      assert.ok(waited >= 3_000, `waited ${waited} ms`);
      release();
      assert.deepEqual(await run.waitFor("completed", { timeoutMs: 60_000 }), { held: 7 });
    } finally {
      release();
    }
  });
});

db.test("events of a map flow come in order, and a late subscriber gets the same events", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, words, {
      connectionString: url,
      queueName: "cl_work",
      maxConcurrent: 4,
    });
    const run = await client.startFlow(words, { text: "a bb ccc" });
    const live = await collect(run.events());
    const expected = [
      `run:started {"text":"a bb ccc"}`,
      "step:started split",
      `step:completed split ["a","bb","ccc"]`,
      "step:started measure",
      "step:completed measure [1,2,3]",
      "step:started total",
      "step:completed total 6",
      `run:completed {"total":6}`,
    ];
    assert.deepEqual(live, expected);
    // Joining after the end: the current state first, so nothing is missed.
    assert.deepEqual(await collect(client.run(run.runId).events()), expected);
    // Joining half-way: the events so far, then the rest, with none twice.
    const second = await client.startFlow(words, { text: "dddd e" });
    const early = second.events();
    assert.equal((await early.next()).value?.type, "run:started");
    await early.return?.(undefined);
    const late = await collect(client.run(second.runId).events());
    assert.equal(late.length, 8);
    assert.equal(new Set(late).size, 8);
    assert.equal(late.at(-1), `run:completed {"total":5}`);
  });
});

db.test("a condition that is not met skips its step; the events say so, in order", async ({ url }) => {
  await withClient(url, async (client, workers) => {
    await startWorker(workers, conditional, { connectionString: url });
    const run = await client.startFlow(conditional, { go: false });
    const events = collect(run.events());
    const output = await run.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual(output, { final: "no" });
    assert.equal(output.maybe, undefined);
    assert.deepEqual(await events, [
      `run:started {"go":false}`,
      "step:started check",
      `step:completed check {"go":false}`,
      "step:skipped maybe condition_unmet",
      "step:started final",
      `step:completed final "no"`,
      `run:completed {"final":"no"}`,
    ]);
    const went = await client.startFlow(conditional, { go: true });
    assert.deepEqual(await went.waitFor("completed", { timeoutMs: 60_000 }), {
      maybe: "went",
      final: "yes",
    });
  });
});

db.test("a client on a pool it was given polls when told to, and leaves the pool open", async ({ url, connect }) => {
  const sql = connect({ max: 2 });
  const client = createClient({ sql, transport: "poll", pollIntervalMs: 20 });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, greet, { connectionString: url });
    assert.equal(await client.transport(), "poll");
    const run = await client.startFlow(greet, { name: "pool" });
    assert.deepEqual(await run.waitFor("completed", { timeoutMs: 60_000 }), {
      hello: { text: "hello pool" },
    });
  } finally {
    await stopAll(workers);
    await client.close();
  }
  assert.deepEqual([...await sql`select 1 as one`], [{ one: 1 }], "the pool is still open");
});
