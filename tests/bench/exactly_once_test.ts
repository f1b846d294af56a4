/** The headline cells' exactly-once check: its arithmetic, and the engine's check on a real run. */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import {
  checkExactlyOnce,
  exactlyOnceViolations,
  type UnitCounts,
  writeLedger,
} from "../../bench/exactly_once.ts";
import { handlerRuns, plainFlow } from "../../bench/flows.ts";
import { startBacklog } from "../../bench/load.ts";
import { createLogger, createWorker } from "../../mod.ts";

const clean: UnitCounts = {
  started: 10,
  steps: 3,
  ledgerRows: 30,
  ledgerOnce: 30,
  ledgerUnits: 10,
  recorded: 30,
  recordedOnce: 30,
  left: 0,
};

Deno.test("exactly-once: every unit's every step once by the ledger and the engine's record", () => {
  assert.deepEqual(exactlyOnceViolations(clean), []);
  assert.deepEqual(exactlyOnceViolations({ ...clean, ledgerOnce: 29 }), [
    "1 unit steps ran more than once",
  ]);
  assert.deepEqual(exactlyOnceViolations({ ...clean, ledgerRows: 29, ledgerOnce: 29 }), [
    "29 unit steps ran, not 30",
  ]);
  assert.deepEqual(exactlyOnceViolations({ ...clean, ledgerUnits: 9 }), ["9 of 10 units ran"]);
  assert.deepEqual(exactlyOnceViolations({ ...clean, recordedOnce: 28 }), [
    "the engine recorded 2 step runs with a retry",
  ]);
  assert.deepEqual(exactlyOnceViolations({ ...clean, recorded: 31, recordedOnce: 31 }), [
    "the engine recorded 31 step runs, not 30",
  ]);
  assert.deepEqual(exactlyOnceViolations({ ...clean, left: 1 }), [
    "1 units or steps were left unfinished",
  ]);
});

const db = testDatabase(import.meta.url);

db.test("the engine's cell check passes on a clean run and names a retried or unrun step", async ({ url, sql }) => {
  handlerRuns.clear();
  const worker = createWorker(plainFlow, {
    connectionString: url,
    logger: createLogger({ level: "error" }),
  });
  await worker.start();
  try {
    await startBacklog(sql, [plainFlow.slug], 20);
    await waitFor(async () => {
      const [{ n }] = await sql<{ n: number }[]>`
        select count(*)::int as n from pgflow.runs where status = 'completed'`;
      return n === 20;
    }, { what: "20 runs completed" });
  } finally {
    await worker.stop();
  }
  await writeLedger(sql, handlerRuns);
  assert.equal(await checkExactlyOnce(sql, "engine cell", "engine", 1), 20);

  // A second attempt recorded by the engine: the check fails, naming the cell.
  await sql`update pgflow.step_tasks set attempts_count = 2
            where run_id = (select run_id from pgflow.step_tasks limit 1)`;
  await assert.rejects(
    checkExactlyOnce(sql, "engine cell", "engine", 1),
    /exactly-once check of "engine cell" failed: the engine recorded 1 step runs with a retry/,
  );
  await sql`update pgflow.step_tasks set attempts_count = 1`;

  // A handler that ran twice (the ledger), and a run whose handler never ran.
  await sql`update bench_ledger set n = 2 where unit = (select min(unit) from bench_ledger)`;
  await sql`delete from bench_ledger where unit = (select max(unit) from bench_ledger)`;
  await assert.rejects(
    checkExactlyOnce(sql, "engine cell", "engine", 1),
    /19 of 20 units ran; 19 unit steps ran, not 20; 1 unit steps ran more than once/,
  );
});
