/**
 * Replies lost on the way back (what a pooler that lost track of a connection does): every call of
 * the worker that waits on one is abandoned after its bound, the error is logged with queue and
 * worker, the connection is replaced, and the worker goes on. A completion whose reply was lost is
 * reported again (idempotently); no handler slot stays held.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWireProxy } from "../support/wire_proxy.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

let release: (() => void) | undefined;
let entered: (() => void) | undefined;

const flow = new Flow<{ n: number }>({ slug: "lost_reply" })
  .step({ slug: "only" }, async (input) => {
    if (input.n === 1) {
      entered?.();
      await new Promise<void>((resolve) => (release = resolve));
    }
    return input.n * 10;
  });

db.test("a lost completion reply and a lost poll reply do not stop the worker", async ({ sql, url }) => {
  const proxy = startWireProxy(Number(new URL(url).port));
  const workers: FlowWorker[] = [];
  try {
    const { worker, logs } = await startWorker(workers, flow, {
      connectionString: proxy.via(url),
      queryTimeoutMs: 800,
      maxPgConnections: 2,
      maxPollSeconds: 1,
      heartbeatIntervalMs: 300,
    });
    const handlerRunning = new Promise<void>((resolve) => (entered = resolve));
    const first = await startRun(sql, "lost_reply", { n: 1 });
    await handlerRunning;
    // The replies lost are those of the very calls under test, whichever connection the pool
    // sends each on: the worker's next poll, then its report of the run's one task (with a read
    // or on its own). Losing every connection open at some moment instead left it to timing
    // whether the report went on one of them.
    const pollLost = proxy.loseReplyTo(/pgflow\.read_and_claim\(/);
    await pollLost;
    const completionLost = proxy.loseReplyTo(/pgflow\.(complete_tasks|complete_and_claim)\(/);
    release!();
    await completionLost;
    assert.deepEqual(await waitForRun(sql, first, 60_000), {
      status: "completed",
      output: { only: 10 },
    });
    const [task] =
      await sql`select attempts_count from pgflow.step_tasks where run_id = ${first}::uuid`;
    assert.equal(task.attempts_count, 1, "the handler ran once; the report was repeated");
    // The worker goes on: new work is picked up on new connections.
    const second = await startRun(sql, "lost_reply", { n: 2 });
    assert.deepEqual(await waitForRun(sql, second, 60_000), {
      status: "completed",
      output: { only: 20 },
    });
    assert.equal(worker.state, "running");
    // The run is completed once its report commits; the slot frees when the reply is read.
    await waitFor(() => worker.inFlight === 0, {
      what: "no handler slot held by a lost reply",
      timeoutMs: 60_000,
    });
    const abandoned = logs.filter((l) => /no answer within \d+ ms/.test(String(l.fields.error)));
    for (const line of abandoned) {
      assert.equal(line.fields.queue, "lost_reply");
      assert.equal(line.fields.worker, worker.id);
    }
    // A call pipelined behind a lost one on the same connection may fail with that one's error.
    const events = abandoned.map((l) => l.event);
    assert.ok(
      events.includes("poll failed; backing off"),
      `the poll was abandoned: ${JSON.stringify(events)}`,
    );
    assert.ok(
      events.includes("complete_task failed; retrying") ||
        events.includes("completions with the read failed; reporting them on their own"),
      `the completion was abandoned and reported again: ${JSON.stringify(events)}`,
    );
    assert.ok(proxy.connections > 2, "connections were replaced");
  } finally {
    release?.();
    // A worker wedged by a lost reply would never stop: fail the test instead of stalling the run.
    await Promise.race([stopAll(workers), new Promise((r) => setTimeout(r, 10_000))]);
    await proxy.close();
  }
});
