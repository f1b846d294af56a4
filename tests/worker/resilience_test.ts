/** Backoff instead of hot loops, bounded caches, and run input loaded by a worker that never saw it. */
import assert from "node:assert/strict";
import { createLogger, Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { backoffDelay, retry } from "../../src/util/backoff.ts";
import { FlowInputCache } from "../../src/task/flow_input.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";
import type postgres from "postgres";

const db = testDatabase(import.meta.url);

Deno.test("backoff: exponential, capped, jittered, never zero", () => {
  const options = { baseMs: 100, maxMs: 1000 };
  for (let attempt = 1; attempt <= 8; attempt++) {
    const ceiling = Math.min(1000, 100 * 2 ** (attempt - 1));
    assert.equal(backoffDelay(attempt, options, () => 0), ceiling / 2);
    assert.equal(backoffDelay(attempt, options, () => 0.999999), ceiling);
  }
});

Deno.test("retry: gives up after the given attempts with the last error", async () => {
  let calls = 0;
  await assert.rejects(
    retry(() => Promise.reject(new Error(`boom ${++calls}`)), {
      attempts: 3,
      backoff: { baseMs: 1, maxMs: 2 },
    }),
    /boom 3/,
  );
  assert.equal(calls, 3);
});

Deno.test("flow input cache is bounded", () => {
  const cache = new FlowInputCache(null as unknown as postgres.Sql, 2);
  cache.seed("r1", 1);
  cache.seed("r2", 2);
  cache.seed("r3", 3);
  assert.equal(cache.size, 2);
});

db.test("a failing database is retried with backoff, not in a hot loop", async ({ sql, url }) => {
  const flow = new Flow<{ id: string }>({ slug: "gone_flow" }).step({ slug: "a" }, (i) => i.id);
  const workers: FlowWorker[] = [];
  // Each failure with when it was logged.
  const failures: { at: number; delayMs: number }[] = [];
  const logger = createLogger({
    level: "debug",
    sink: (r) => {
      if (r.event === "poll failed; backing off") {
        failures.push({ at: performance.now(), delayMs: Number(r.fields.delayMs) });
      }
    },
  });
  try {
    const { worker } = await startWorker(workers, flow, { connectionString: url, logger });
    // Every read now fails: the queue is gone.
    await sql`select pgmq.drop_queue('gone_flow')`;
    await waitFor(() => failures.length >= 4, { what: "four failed polls" });
    const delays = failures.map((f) => f.delayMs);
    assert.ok(delays.at(-1)! > delays[0], `delays grow: ${delays.join(", ")}`);
    // Calmly: each try waited out the delay the one before logged (a busy machine only makes
    // the waits longer; a hot loop would not wait at all).
    for (let i = 1; i < failures.length; i++) {
      const waited = failures[i].at - failures[i - 1].at;
      assert.ok(
        waited >= failures[i - 1].delayMs * 0.9,
        `waited ${waited} ms, not ${delays[i - 1]}`,
      );
    }
    assert.equal(worker.state, "running");
  } finally {
    await stopAll(workers);
  }
});

db.test("a worker that only runs a dependent step loads the run input itself", async ({ sql, url }) => {
  let loaded: unknown;
  const flow = new Flow<{ city: string }>({ slug: "split_flow" })
    .step({ slug: "root" }, (input) => input.city.length)
    .step({ slug: "leaf", dependsOn: ["root"] }, async (deps, ctx) => {
      loaded = await ctx.flowInput;
      return deps.root;
    });
  const routed = routeFlow(flow, { queues: { root: "split_root", leaf: "split_leaf" } });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, [routed], { queueName: "split_root", connectionString: url });
    await startWorker(workers, [routed], { queueName: "split_leaf", connectionString: url });
    const run = await startRun(sql, "split_flow", { city: "Lagos" });
    assert.deepEqual(await waitForRun(sql, run), { status: "completed", output: { leaf: 5 } });
    await waitFor(() => loaded !== undefined, { what: "the input" });
    assert.deepEqual(loaded, { city: "Lagos" });
  } finally {
    await stopAll(workers);
  }
});

Deno.test("context.supabase is created once when SUPABASE_URL and a key are set", async () => {
  const { prepareSupabaseClient } = await import("../../src/platform/supabase_client.ts");
  const missing = await prepareSupabaseClient({});
  assert.throws(() => missing(), /set SUPABASE_URL and SUPABASE_SERVICE_ROLE_KEY/);
  const get = await prepareSupabaseClient({
    SUPABASE_URL: "http://127.0.0.1:54321",
    SUPABASE_SERVICE_ROLE_KEY: "service-role-key",
  });
  assert.equal(typeof get().from, "function");
  assert.equal(get(), get());
});
