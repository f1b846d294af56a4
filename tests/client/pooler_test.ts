/**
 * The client behind PgBouncer in transaction mode (the stand-in for Supavisor on port 6543):
 * LISTEN would deliver nothing there, so the client polls get_run, and waiting and events work
 * the same. PgBouncer never loses track of a server connection.
 */
import assert from "node:assert/strict";
import { createClient, type FlowWorker, type RunEvent, RunFailedError } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { bouncerFor } from "../pooler/harness.ts";
import { failing, words } from "./fixtures.ts";

const db = testDatabase(import.meta.url);

db.test("behind a transaction pooler the client polls: waitFor and events work", async ({ url }) => {
  const bouncer = await bouncerFor(url, "transaction");
  const client = createClient({
    connectionString: bouncer.via(url),
    pollIntervalMs: 50,
    maxPollIntervalMs: 400,
  });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, words, { connectionString: url, queueName: "cl_work" });
    await startWorker(workers, failing, { connectionString: url });
    assert.equal(await client.transport(), "poll");
    const run = await client.startFlow(words, { text: "x yy zzz" }, { runId: crypto.randomUUID() });
    const events: RunEvent<typeof words>[] = [];
    for await (const e of run.events()) events.push(e);
    assert.deepEqual(
      events.map((e) => e.type + ("stepSlug" in e && e.stepSlug ? ` ${e.stepSlug}` : "")),
      [
        "run:started",
        "step:started split",
        "step:completed split",
        "step:started measure",
        "step:completed measure",
        "step:started total",
        "step:completed total",
        "run:completed",
      ],
    );
    assert.deepEqual(await run.waitFor("completed", { timeoutMs: 60_000 }), { total: 6 });
    // Many waits at once share nothing but the pooler.
    const runs = await Promise.all(
      Array.from(
        { length: 10 },
        (_, i) => client.startFlow(words, { text: "a ".repeat(i + 1).trim() }),
      ),
    );
    const outputs = await Promise.all(
      runs.map((r) => r.waitFor("completed", { timeoutMs: 60_000 })),
    );
    assert.deepEqual(outputs.map((o) => o.total), Array.from({ length: 10 }, (_, i) => i + 1));
    const failed = await client.startFlow(failing, { id: 1 });
    await assert.rejects(failed.waitFor("completed", { timeoutMs: 60_000 }), RunFailedError);
    assert.doesNotMatch(
      await bouncer.log(),
      /not linked|got dirty/,
      "PgBouncer lost track of no server",
    );
  } finally {
    await stopAll(workers);
    await client.close();
    await bouncer.destroy();
  }
});
