/**
 * The Edge path end to end, in this process: `EdgeWorker.start` serving the HTTP trigger (as on
 * Supabase, `EDGE_WORKER_TRIGGER=http`), the worker started by the first authorised request, and
 * the platform's `beforeunload` dispatched while that worker is still starting (as an early drop or
 * a limit can). The worker must end its startup without a read: the queued task stays queued and
 * its message unread, for the next isolate, instead of being claimed and left to stalled recovery.
 *
 * `EdgeWorker` is one per process, so this file holds one test.
 */
import assert from "node:assert/strict";
import { createLogger, EdgeWorker, Flow } from "../../mod.ts";
import { freePort } from "../../src/cli/db/server.ts";
import { testDatabase } from "../support/db.ts";
import { assertUntouched, startRun, startWorker } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

const flow = new Flow<{ n: number }>({ slug: "unload_starting" })
  .step({ slug: "only" }, (input) => input.n);

db.test("beforeunload while the first request starts the worker: nothing is read or claimed", async ({ sql, url }) => {
  // The flow and its queue exist, with queued work, before the isolate's worker starts.
  const warm = await startWorker([], flow, { connectionString: url });
  await warm.worker.stop();
  const run = await startRun(sql, "unload_starting", { n: 1 });

  const port = freePort();
  let unloaded = false;
  const logger = createLogger({
    level: "debug",
    sink: (record) => {
      // The worker has its connection and is about to compile: the platform says it unloads.
      if (record.event === "database connection" && !unloaded) {
        unloaded = true;
        globalThis.dispatchEvent(
          new CustomEvent("beforeunload", { detail: { reason: "EarlyDrop" } }),
        );
      }
    },
  });
  await EdgeWorker.start(flow, {
    connectionString: url,
    logger,
    env: { EDGE_WORKER_TRIGGER: "http", PORT: String(port), PGFLOW_AUTH_SECRET: "s" },
  });
  const response = await fetch(`http://127.0.0.1:${port}/unload_starting`, {
    method: "POST",
    headers: { authorization: "Bearer s" },
  });
  await response.body?.cancel();
  assert.ok(unloaded, "beforeunload came while the worker started");
  await EdgeWorker.stop();

  await assertUntouched(sql, run, "unload_starting");
  assert.equal(response.status, 503, "the request is told the isolate unloads");
});
