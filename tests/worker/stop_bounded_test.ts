/**
 * `stop()` ends whatever the database did before it. Here every connection of two workers stops
 * answering at once without closing (replies lost on the way back, as a pooler or proxy that lost
 * track of them does, or a partition): the pools replace theirs as each call runs past its bound,
 * and so must the LISTEN connection. Its calls had no bound, so the worker that closed it last
 * waited for ever in `stop()` (heartbeats stopped, the row never marked stopped, stalled recovery
 * still running), and a poll loop telling senders it waits could not be stopped either.
 *
 * The workers' calls are bounded at 1 s here; the tests allow far more before they call a wait a
 * hang, so a busy machine cannot fail them.
 */
import assert from "node:assert/strict";
import { createLogger, createPool, Flow, type FlowWorker, type LogRecord } from "../../mod.ts";
import { ChannelListener } from "../../src/platform/listen.ts";
import { openWakeups } from "../../src/task/wakeups.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWireProxy } from "../support/wire_proxy.ts";
import { backdateStuck, repeat } from "../reliability/harness.ts";
import { startRun, startWorker, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** Longer than any bound of the workers here by far: a wait this long is a hang. */
const HANG_MS = 60_000;

/** Resolves `true` once `promise` settles, `false` after `ms`; clears its timer either way. */
async function settles(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise.then(() => true, () => true),
      new Promise<boolean>((resolve) => timer = setTimeout(() => resolve(false), ms)),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

const flow = new Flow<{ n: number }>({ slug: "stop_silent" })
  .step({ slug: "only" }, (input) => input.n * 10);

db.test(
  "two workers whose connections all stop answering still stop, and leave no timer or connection",
  async ({ sql, url }) => {
    const proxy = startWireProxy(Number(new URL(url).port));
    const workers: FlowWorker[] = [];
    try {
      for (let i = 0; i < 2; i++) {
        await startWorker(workers, flow, {
          connectionString: proxy.via(url),
          wakeups: "listen",
          queryTimeoutMs: 1000,
          maxPollSeconds: 1,
          heartbeatIntervalMs: 200,
          stalledRecoveryIntervalMs: 300,
          shutdownTimeoutMs: 1000,
        });
      }
      for (let n = 0; n < 4; n++) {
        const run = await startRun(sql, "stop_silent", { n });
        assert.equal((await waitForRun(sql, run)).status, "completed");
      }
      // Every connection open now, the pools' and the shared LISTEN connection, goes silent.
      proxy.loseReplies();
      // A claim whose reply is lost stays started until stalled recovery (timeout + 30 s): the
      // handler takes milliseconds, so one started for seconds is such a claim, and is aged.
      const stopAging = repeat(300, () => backdateStuck(sql, 3000));
      try {
        for (let n = 4; n < 8; n++) {
          const run = await startRun(sql, "stop_silent", { n });
          assert.equal((await waitForRun(sql, run, 30_000)).status, "completed");
        }
      } finally {
        await stopAging();
      }
      const stopped = await settles(Promise.all(workers.map((w) => w.stop())), HANG_MS);
      assert.ok(stopped, `stop() did not return (states: ${workers.map((w) => w.state)})`);
      assert.deepEqual(workers.map((w) => w.state), ["stopped", "stopped"]);
      const rows = await sql`
        select stopped_at from pgflow.workers where worker_id = any(${
        workers.map((w) => w.id)
      }::uuid[])`;
      assert.equal(rows.filter((r) => r.stopped_at !== null).length, 2, "both rows marked stopped");
      // No connection of either worker is left (the op sanitizer checks their timers).
      await waitFor(() => proxy.open === 0, { what: "every connection of the workers to close" });
    } finally {
      await settles(Promise.all(workers.map((w) => w.stop())), HANG_MS);
      await proxy.close();
    }
  },
  { sanitizeOps: true },
);

db.test("a poll loop that tells senders it waits can be stopped meanwhile", async ({ url }) => {
  const proxy = startWireProxy(Number(new URL(url).port));
  const pool = createPool(proxy.via(url), { max: 1 });
  const logs: LogRecord[] = [];
  const log = createLogger({ level: "debug", sink: (r) => logs.push(r) });
  try {
    const opened = await openWakeups(
      pool,
      "stop_silent",
      [["stop_silent", "only"]],
      "listen",
      { kind: "direct", evidence: "test" },
      log,
      5_000,
    );
    const wakeups = opened.wakeups!;
    // The LISTEN is made; telling senders that the worker waits (its first wait) gets no answer.
    proxy.loseReplies();
    const polling = new AbortController();
    const waited = wakeups.wait(HANG_MS, polling.signal);
    await new Promise((r) => setTimeout(r, 100));
    polling.abort();
    assert.ok(await settles(waited, HANG_MS), "the wait ended when the loop was stopped");
    assert.deepEqual(
      logs.filter((l) => l.event.startsWith("could not tell senders")),
      [],
      "it ended by the stop, not by the call failing",
    );
    assert.ok(await settles(opened.close(), HANG_MS), "the wake-ups closed");
  } finally {
    await pool.end({ timeout: 1 });
    await proxy.close();
  }
});

db.test("a LISTEN connection that stops answering: the call fails after its bound, the next one gets a new connection", async ({ sql, url }) => {
  const proxy = startWireProxy(Number(new URL(url).port));
  const pool = createPool(proxy.via(url), { max: 1 });
  const options = { applicationName: "stop_silent", timeoutMs: 500 };
  const listener = new ChannelListener(pool, options);
  const events: string[] = [];
  try {
    await listener.subscribe("pgflow_queue:stop_silent", (event) => events.push(event));
    proxy.loseReplies();
    const call = listener.startWaiting("pgflow_queue:stop_silent");
    assert.ok(await settles(call, HANG_MS), "the call ended");
    await assert.rejects(call, /LISTEN connection: listen_start: no answer within 500 ms/);
    // The silent connection was replaced: the channel is listened to again, on a new one.
    await waitFor(() => events.includes("back"), { what: "the LISTEN to come back" });
    assert.deepEqual(events.slice(0, 1), ["lost"]);
    await listener.startWaiting("pgflow_queue:stop_silent");
    const [waiting] = await sql`
      select count(*)::int as n from pgflow.listeners l join pg_stat_activity a using (pid)
      where a.application_name = 'stop_silent' and l.channel = 'pgflow_queue:stop_silent'`;
    assert.equal(waiting.n, 1, "senders were told again, from the new connection");
    assert.ok(await settles(listener.close(), HANG_MS), "the listener closed");
  } finally {
    await settles(listener.close(), HANG_MS);
    await pool.end({ timeout: 1 });
    await proxy.close();
  }
});
