/**
 * A handler output Postgres cannot store (a string with U+0000, which jsonb refuses) fails the
 * attempt at once with the storage error, instead of retrying complete_task until the task is
 * left to stalled recovery (whose error, "stalled: no completion", hides the cause). Alone and
 * among batched completions; good outputs around it complete.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { isUnstorableOutput, unstorableOutputMessage } from "../../src/completion/sql.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const flow = new Flow<{ n: number; bad?: boolean }>({
  slug: "unstorable",
  maxAttempts: 2,
  baseDelay: 1,
}).step(
  { slug: "work" },
  (input): { text?: string; n?: number } =>
    input.bad ? { text: "before\u0000after" } : { n: input.n },
);

async function taskRow(sql: import("postgres").Sql, run: string) {
  const [row] = await sql<{ status: string; attempts_count: number; error_message: string }[]>`
    select status, attempts_count, error_message from pgflow.step_tasks where run_id = ${run}::uuid`;
  return row;
}

db.test("an output jsonb cannot hold fails the attempt at once with the storage error", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const run = await startRun(sql, "unstorable", { n: 1, bad: true });
    // Both attempts fail the same way; with report retries (6, backoff from 250 ms) and no
    // stalled recovery in these tests, the run would still be started after 10 s.
    assert.equal((await waitForRun(sql, run)).status, "failed");
    const task = await taskRow(sql, run);
    assert.equal(task.status, "failed");
    assert.equal(task.attempts_count, 2);
    assert.match(task.error_message, /^output could not be stored \(SQLSTATE 22P05\): /);
    assert.match(task.error_message, /unsupported Unicode escape sequence/);
    assert.doesNotMatch(task.error_message, /before|after/, "the output is not quoted");
    assert.deepEqual(logs.filter((l) => /complete_task failed/.test(l.event)), []);
    const failed = logs.filter((l) => l.event === "task failed");
    assert.equal(failed.length, 2);
    assert.ok(
      logs.some((l) => l.event === "output could not be stored" && l.fields.code === "22P05"),
    );
  } finally {
    await stopAll(workers);
  }
});

db.test("among batched completions only the unstorable output fails", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    // Slow completions (the batcher keeps two in flight) make the rest pile up into batches.
    await sql`create or replace function pgflow_test_slow() returns trigger language plpgsql
              set search_path = '' as $$ begin perform pg_sleep(0.2); return new; end $$`;
    await sql`create trigger slow before update on pgflow.step_tasks for each row
              when (new.status = 'completed') execute function pgflow_test_slow()`;
    const { logs } = await startWorker(workers, flow, {
      connectionString: url,
      maxConcurrent: 10,
      batchSize: 10,
    });
    const runs = await Promise.all(
      Array.from({ length: 20 }, (_, n) => startRun(sql, "unstorable", { n, bad: n % 5 === 3 })),
    );
    const rows = await Promise.all(runs.map((r) => waitForRun(sql, r)));
    assert.deepEqual(
      rows.map((r) => r.status),
      runs.map((_, n) => n % 5 === 3 ? "failed" : "completed"),
    );
    assert.deepEqual(rows[12].output, { work: { n: 12 } });
    assert.match((await taskRow(sql, runs[13])).error_message, /SQLSTATE 22P05/);
    assert.deepEqual(logs.filter((l) => /complete_task failed/.test(l.event)), []);
  } finally {
    await stopAll(workers);
    await sql`drop trigger if exists slow on pgflow.step_tasks`;
  }
});

db.test("only data exceptions and program limits count as an output that cannot be stored", async ({ sql, connect }) => {
  const fail = (q: PromiseLike<unknown>) => Promise.resolve(q).then(() => undefined, (e) => e);
  const nul = await fail(sql`select ${'{"t": "a\\u0000b"}'}::text::jsonb`);
  const syntax = await fail(sql`select ${"{"}::text::jsonb`);
  const tooLarge = await fail(sql`select repeat('x', 1073741824)`);
  const divide = await fail(sql`select 1 / ${0}::int`);
  const other = connect();
  const terminated = await fail(other`select pg_terminate_backend(pg_backend_pid())`);
  await other.end({ timeout: 0 });
  const codes = [nul, syntax, tooLarge, divide, terminated].map((e) =>
    (e as { code: string }).code
  );
  assert.deepEqual(codes, ["22P05", "22P02", "54000", "22012", "57P01"]);
  assert.deepEqual(
    [nul, syntax, tooLarge, divide, terminated, new Error("x"), undefined].map(isUnstorableOutput),
    [true, true, true, true, false, false, false],
  );
  const message = unstorableOutputMessage(nul);
  assert.match(message, /^output could not be stored \(SQLSTATE 22P05\): unsupported Unicode/);
  assert.doesNotMatch(message, /a\\u0000b/, "not the context line, which quotes the output");
});

db.test("an output JSON cannot hold (a bigint) fails naming the step and saying outputs must be JSON", async ({ sql, url }) => {
  // The types refuse a bigint output (tests/types/flow.types.ts); plain JavaScript does not.
  const bigints = new Flow<{ n: number }>({ slug: "bigint_out", maxAttempts: 1 })
    .step({ slug: "count" }, ((input: { n: number }) => ({ total: BigInt(input.n) })) as never);
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, bigints, { connectionString: url });
    const run = await startRun(sql, "bigint_out", { n: 7 });
    assert.equal((await waitForRun(sql, run)).status, "failed");
    const task = await taskRow(sql, run);
    assert.match(
      task.error_message,
      /^step bigint_out\.count returned a value JSON cannot hold: .*BigInt.*String\(n\).*a step's output must be JSON/,
    );
  } finally {
    await stopAll(workers);
  }
});
