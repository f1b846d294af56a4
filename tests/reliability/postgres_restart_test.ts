/**
 * Postgres restarts mid-run: on a server of its own (never the shared test server), workers lose
 * every connection while tasks are being claimed and completed, keep running, reconnect on their
 * own once the server is back, and finish every run. Claims and completions whose replies were
 * lost in the outage are taken back by stalled recovery; nothing is lost or executed twice.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import type { FlowWorker, LogRecord } from "../../mod.ts";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import {
  backdateStuck,
  checkInvariants,
  createExecLog,
  loadV1,
  loadV2,
  QUEUES,
  repeat,
  seedFromEnv,
  startLoadRuns,
  waitForLoadRuns,
} from "./harness.ts";

Deno.test("workers ride out a Postgres restart and finish every run", async () => {
  const pg = await startLocalPostgres();
  const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
  const workers: FlowWorker[] = [];
  try {
    await installPgmq(sql);
    await applyMigrations(sql);
    await createExecLog(sql);
    const seed = seedFromEnv();
    const logs: LogRecord[][] = [];
    for (const queue of QUEUES) {
      const w = await startWorker(workers, [loadV1, loadV2], {
        connectionString: pg.url,
        queueName: queue,
        maxConcurrent: 6,
        batchSize: 6,
        visibilityTimeout: 2,
        stalledRecoveryIntervalMs: 200,
        context: { load: { failRate: 0.1, seed, delayMs: 30 } },
      });
      logs.push(w.logs);
    }
    await startLoadRuns(sql, 20);
    await waitFor(
      () =>
        sql`select count(*)::int as n from pgflow.step_tasks where status = 'completed'`
          .then(([r]) => r.n >= 40),
      { what: "work to be under way" },
    );
    await pg.stop();
    await new Promise((r) => setTimeout(r, 1500));
    await pg.start();

    let backdated = 0;
    const stopBackdating = repeat(300, async () => (backdated += await backdateStuck(sql, 3000)));
    try {
      await waitForLoadRuns(sql, 180_000);
    } finally {
      await stopBackdating();
    }
    assert.deepEqual(workers.map((w) => w.state), ["running", "running"]);
    const events = new Set(
      logs.flat().filter((l) => l.level !== "debug" && l.level !== "info").map((l) => l.event),
    );
    console.log([...events]);
    assert.ok(events.size > 0, "the workers saw the outage");
    await stopAll(workers);
    const figures = await checkInvariants(sql).catch((error: Error) => {
      // The workers' lines about the runs named, so a failure explains itself.
      const named = new Set(error.message.match(/[0-9a-f]{8}-[0-9a-f-]{27}/g) ?? []);
      const lines = logs.flat().filter((l) => named.has(String(l.fields.runId)));
      console.log(JSON.stringify(lines.slice(0, 60), null, 0));
      throw error;
    });
    console.log(JSON.stringify({ seed, backdated, ...figures }));
    assert.equal(figures.runs, 20);
  } finally {
    await stopAll(workers);
    await sql.end({ timeout: 1 });
    await pg.destroy();
  }
});
