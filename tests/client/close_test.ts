/**
 * The client's ends, against a real database: `close()` stops pending waits (they reject with
 * `ClientClosedError`) and ends `events()` iterations, on every transport; a pool the caller ended
 * is final, not a connection loss retried forever; and a handle named with the wrong flow refuses
 * to read the run. The runs here are of flows no worker serves, so they never finish.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import {
  ClientClosedError,
  type ClientOptions,
  createClient,
  type FlowRun,
  type PgflowClient,
  RunFlowMismatchError,
  RunTimeoutError,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

/**
 * How long a wait or an iteration may take to notice its end: "at once" against the 120 s a
 * pending waitFor here would otherwise take; a busy machine delays the end by seconds, never that.
 */
const PROMPT_MS = 30_000;

/** Two flows of one step each, compiled but served by no worker: their runs stay `started`. */
async function idleFlows(sql: postgres.Sql): Promise<void> {
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'cl_idle_a'`;
  if (n > 0) return;
  await sql`select pgflow.create_flow('cl_idle_a')`;
  await sql`select pgflow.add_step('cl_idle_a', 'a')`;
  await sql`select pgflow.create_flow('cl_idle_b')`;
  await sql`select pgflow.add_step('cl_idle_b', 'b')`;
}

/** `promise`'s outcome, or a failure naming `what` when it takes longer than `ms`. */
async function within<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} still pending after ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A pending `waitFor` and a pending `events()` iteration on `run`, once both are under way. */
async function pendingWaits(run: FlowRun) {
  const wait = run.waitFor("completed", { timeoutMs: 120_000 }).then(
    () => assert.fail("an idle run cannot complete"),
    (e: unknown) => e,
  );
  const seen: string[] = [];
  let first!: () => void;
  const started = new Promise<void>((r) => first = r);
  const iteration = (async () => {
    for await (const event of run.events()) {
      seen.push(event.type);
      first();
    }
  })().then(() => "ended", (e: unknown) => e);
  await within(started, PROMPT_MS, "the first event");
  // Let both settle into their sleep (or their subscription) before the end comes.
  await new Promise((r) => setTimeout(r, 300));
  return { wait, iteration, seen };
}

const closeCases: [string, (url: string, sql: postgres.Sql) => ClientOptions, string][] = [
  ["connectionString, auto (LISTEN)", (url) => ({ connectionString: url }), "listen"],
  ["connectionString, poll", (url) => ({ connectionString: url, transport: "poll" }), "poll"],
  ["a given pool, LISTEN", (_, sql) => ({ sql, transport: "listen" }), "listen"],
  ["a given pool, poll", (_, sql) => ({ sql, transport: "poll" }), "poll"],
];

for (const [name, options, transport] of closeCases) {
  db.test(`close() rejects a pending waitFor and ends an events iteration at once: ${name}`, async ({ sql, url, connect }) => {
    await idleFlows(sql);
    const pool = connect({ max: 2 });
    const client = createClient(options(url, pool));
    let closed = false;
    try {
      assert.equal(await client.transport(), transport);
      const run = await client.startFlow("cl_idle_a", {});
      const { wait, iteration, seen } = await pendingWaits(run);
      const t0 = Date.now();
      await client.close();
      closed = true;
      const error = await within(wait, PROMPT_MS, "waitFor after close()");
      assert.ok(error instanceof ClientClosedError, String(error));
      assert.equal(error.reason, "closed");
      assert.equal(error.runId, run.runId);
      assert.match(
        error.message,
        new RegExp(`waitFor on run ${run.runId}: the client was closed \\(client.close\\(\\)\\)`),
      );
      assert.equal(await within(iteration, PROMPT_MS, "events() after close()"), "ended");
      assert.deepEqual(seen, ["run:started", "step:started"]);
      assert.ok(Date.now() - t0 < PROMPT_MS, `took ${Date.now() - t0} ms`);
      // Whatever comes after close() is refused the same way, at once.
      const isClosed = (e: unknown) => e instanceof ClientClosedError && e.reason === "closed";
      await assert.rejects(run.waitFor("terminal"), isClosed);
      await assert.rejects(run.state(), isClosed);
      await assert.rejects(run.events().next(), isClosed);
      await assert.rejects(client.getRun(run.runId), isClosed);
      await assert.rejects(client.startFlow("cl_idle_a", {}), isClosed);
    } finally {
      if (!closed) await client.close();
    }
    // The client never ends a pool it was given.
    assert.deepEqual([...await pool`select 1 as one`], [{ one: 1 }]);
  });
}

for (const transport of ["listen", "poll"] as const) {
  db.test(`a given pool that the caller ends is final, not retried: ${transport}`, async ({ sql, connect }) => {
    await idleFlows(sql);
    const pool = connect({ max: 2 });
    // The ended pool is noticed at the next reading: within a second here.
    const client = createClient({
      sql: pool,
      transport,
      safetyIntervalMs: 1_000,
      maxPollIntervalMs: 1_000,
    });
    try {
      assert.equal(await client.transport(), transport);
      const run = await client.startFlow("cl_idle_a", {});
      const { wait, iteration, seen } = await pendingWaits(run);
      await pool.end();
      const isEnded = (e: unknown) =>
        e instanceof ClientClosedError && e.reason === "pool_ended" && e.runId === run.runId &&
        /reading run [0-9a-f-]{36}: the postgres\.js pool given to createClient has ended/.test(
          e.message,
        );
      const error = await within(wait, PROMPT_MS + 1_000, "waitFor after sql.end()");
      assert.ok(isEnded(error), String(error));
      const ended = await within(iteration, PROMPT_MS + 1_000, "events() after sql.end()");
      assert.ok(isEnded(ended), String(ended));
      assert.deepEqual(seen, ["run:started", "step:started"]);
      await assert.rejects(
        client.startFlow("cl_idle_a", {}),
        (e: unknown) => e instanceof ClientClosedError && e.reason === "pool_ended",
      );
    } finally {
      await client.close();
    }
  });
}

db.test("client.run(id, slug) of another flow refuses to read it, naming the run and both flows", async ({ sql, url }) => {
  await idleFlows(sql);
  const client: PgflowClient = createClient({ connectionString: url, transport: "poll" });
  try {
    const { runId } = await client.startFlow("cl_idle_a", {});
    const wrong = client.run(runId, "cl_idle_b");
    assert.equal(wrong.flowSlug, "cl_idle_b");
    const mismatch = (e: unknown) =>
      e instanceof RunFlowMismatchError && e.runId === runId && e.flowSlug === "cl_idle_a" &&
      e.expectedFlowSlug === "cl_idle_b" && e.status === "started" &&
      e.message.includes(`run ${runId} is a run of flow cl_idle_a, not cl_idle_b`);
    await assert.rejects(
      within(wrong.waitFor("completed", { timeoutMs: 60_000 }), PROMPT_MS, "waitFor"),
      mismatch,
    );
    await assert.rejects(wrong.state(), mismatch);
    await assert.rejects(within(wrong.events().next(), PROMPT_MS, "events()"), mismatch);
    // The right slug, or none, reads the run as before.
    for (const handle of [client.run(runId, "cl_idle_a"), client.run(runId)]) {
      assert.equal((await handle.state()).flowSlug, "cl_idle_a");
      await assert.rejects(handle.waitFor("terminal", { timeoutMs: 200 }), RunTimeoutError);
      const events = handle.events();
      assert.equal((await events.next()).value?.type, "run:started");
      await events.return?.(undefined);
    }
  } finally {
    await client.close();
  }
});
