/**
 * Events across a Postgres restart, on a server of its own: a subscriber on LISTEN loses its
 * connection mid-run, listens again once the server is back, reads the run's current state and
 * goes on, so every event arrives once and in order. The safety re-read is set to a minute, so
 * the events after the restart are the re-established LISTEN's doing, not a timer's.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createClient, Flow, type FlowWorker, type RunEvent } from "../../mod.ts";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { backdateStuck, repeat } from "../reliability/harness.ts";

const nap = (ms: number) => new Promise((r) => setTimeout(r, ms));

const steady = new Flow<{ ms: number }>({ slug: "cl_steady" })
  .step({ slug: "a" }, async (input) => {
    await nap(input.ms);
    return 1;
  })
  .step({ slug: "b", dependsOn: ["a"] }, async (deps) => {
    await nap(300);
    return deps.a + 1;
  })
  .step({ slug: "c", dependsOn: ["b"] }, (deps) => deps.b + 1);

function line(e: RunEvent): string {
  return "stepSlug" in e && e.stepSlug !== null ? `${e.type} ${e.stepSlug}` : e.type;
}

Deno.test("run events resume from the current state after a Postgres restart", async () => {
  const pg = await startLocalPostgres();
  const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
  const workers: FlowWorker[] = [];
  const client = createClient({ connectionString: pg.url, safetyIntervalMs: 60_000 });
  try {
    await installPgmq(sql);
    await applyMigrations(sql);
    await startWorker(workers, steady, {
      connectionString: pg.url,
      visibilityTimeout: 2,
      stalledRecoveryIntervalMs: 200,
    });
    assert.equal(await client.transport(), "listen");
    const run = await client.startFlow(steady, { ms: 1_500 });
    const seen: string[] = [];
    let aStarted!: () => void;
    const started = new Promise<void>((r) => aStarted = r);
    const collected = (async () => {
      for await (const e of run.events()) {
        seen.push(line(e));
        if (line(e) === "step:started a") aStarted();
      }
    })();
    await started;
    await pg.stop();
    await nap(1_500);
    await pg.start();
    // Tasks whose replies were lost in the outage come back by stalled recovery.
    const stopBackdating = repeat(300, () => backdateStuck(sql, 2_000).catch(() => 0));
    try {
      await Promise.race([
        collected,
        nap(40_000).then(() => assert.fail(`events stopped after the restart: ${seen.join(", ")}`)),
      ]);
    } finally {
      await stopBackdating();
    }
    assert.deepEqual(seen, [
      "run:started",
      "step:started a",
      "step:completed a",
      "step:started b",
      "step:completed b",
      "step:started c",
      "step:completed c",
      "run:completed",
    ]);
    // A run started after the restart is heard on the new LISTEN connection, at once.
    const after = await client.startFlow(steady, { ms: 10 });
    const t0 = Date.now();
    assert.deepEqual(await after.waitFor("completed", { timeoutMs: 60_000 }), { c: 3 });
    assert.ok(Date.now() - t0 < 20_000);
  } finally {
    await client.close();
    await stopAll(workers);
    await sql.end({ timeout: 1 });
    await pg.destroy();
  }
});
