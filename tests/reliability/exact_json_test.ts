/**
 * What a run carries arrives exactly (as jsonb compares): random JSON documents (seeded, printed;
 * replay with RELIABILITY_SEED) with escaped keys of every kind, shapes repeated so that V8's
 * JSON.parse key-cache bug would strike, deep nesting, unicode, integers beyond 2^53 and decimals
 * with more digits than a double keeps, started from SQL, go through real workers whose handlers
 * return what they receive; the run output equals the input.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { seedFromEnv } from "./harness.ts";
import { randomJsonDocuments } from "./random_json.ts";

const db = testDatabase(import.meta.url);
const SEED = seedFromEnv();
console.log(`exact-json seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`);

/**
 * `echo` returns the run input, `again` what `echo` returned, `whole` the run input read through
 * `context.flowInput`. `echo` runs on one queue and the others on another, so the second worker
 * loads the run input from the database (its cache never saw the root task).
 */
const echo = routeFlow(
  new Flow<unknown>({ slug: "xj_echo", maxAttempts: 1 })
    .step({ slug: "echo" }, (input) => input as never)
    .step({ slug: "again", dependsOn: ["echo"] }, (deps) => deps.echo as never)
    .step(
      { slug: "whole", dependsOn: ["echo"] },
      async (_deps, context) => (await context.flowInput) as never,
    ),
  { queues: { echo: "xj_first", again: "xj_second", whole: "xj_second" } },
);

/**
 * The runs whose outputs differ from their input (as jsonb compares): the run output (the leaf
 * steps `again` and `whole`) and `echo`'s stored output.
 */
async function mismatches(sql: postgres.Sql, runs: readonly string[]): Promise<string[]> {
  const rows = await sql<{ run_id: string; status: string; same: boolean }[]>`
    select r.run_id::text, r.status,
           r.output = jsonb_build_object('again', r.input, 'whole', r.input)
             and s.output = r.input as same
    from pgflow.runs r
    join pgflow.step_states s on s.run_id = r.run_id and s.step_slug = 'echo'
    where r.run_id = any(${runs as string[]}::uuid[])`;
  return rows.filter((r) => r.status !== "completed" || !r.same)
    .map((r) => `${r.run_id} ${r.status}`);
}

db.test("random JSON started from SQL comes back exactly through real workers", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, echo, { connectionString: url, queueName: "xj_first" });
    await startWorker(workers, echo, { connectionString: url, queueName: "xj_second" });
    const documents = randomJsonDocuments({ count: 120, seed: SEED });
    const runs: string[] = [];
    // One after another: the bug needs an earlier document of the same shape parsed first.
    for (const text of documents) {
      const [row] = await sql<{ run_id: string }[]>`
        select run_id::text from pgflow.start_flow('xj_echo', ${text}::text::jsonb)`;
      runs.push(row.run_id);
      await waitForRun(sql, row.run_id, 20_000);
    }
    const bad = await mismatches(sql, runs);
    assert.deepEqual(
      bad.map((b) => `${b}: ${documents[runs.indexOf(b.split(" ")[0])]}`),
      [],
      `seed ${SEED}`,
    );
  } finally {
    await stopAll(workers);
  }
});
