/**
 * A watcher tells senders that it waits for its run (pgflow sends a run's notifications only
 * then). A change committed by a transaction that looked before the watcher said so is announced
 * to no one: the watcher's barrier is tried again until that transaction has ended, and then the
 * watcher reads again, long before its safety re-read (a minute here).
 */
import assert from "node:assert/strict";
import { createClient } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("a change committed while the watcher subscribed is seen at once, not at the safety re-read", async ({ sql, url }) => {
  await defineFlow(sql, "nd_flow", [{ slug: "a" }]);
  const [{ run_id: runId }] = await sql`select run_id from pgflow.start_flow('nd_flow', '{}')`;
  const client = createClient({ connectionString: url, safetyIntervalMs: 60_000 });
  const canceller = await sql.reserve();
  try {
    assert.equal(await client.transport(), "listen");
    // The cancel has looked for watchers (none) and is not committed yet.
    await canceller`begin`;
    await canceller`select pgflow.cancel_run(${runId})`;
    const started = Date.now();
    const terminal = client.run(runId).waitFor("terminal", { timeoutMs: 60_000 });
    await new Promise((r) => setTimeout(r, 500));
    await canceller`commit`;
    const state = await terminal;
    assert.equal(state.status, "cancelled");
    // Announced, not found by the 60 s safety read (a busy machine adds seconds, not a minute).
    assert.ok(Date.now() - started < 30_000, `seen after ${Date.now() - started} ms`);
  } finally {
    canceller.release();
    await client.close();
  }
});
