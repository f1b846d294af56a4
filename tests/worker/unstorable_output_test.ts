/**
 * A handler output Postgres cannot store fails the attempt at once with the storage error, instead
 * of retrying complete_task until the task is left to stalled recovery (whose error, "stalled: no
 * completion", hides the cause). Alone and among batched completions; good outputs around it
 * complete. Here the output is a number beyond numeric's range (an `exactNumber`, which the worker
 * writes as it is); what the worker can see itself (U+0000, a lone surrogate, NaN, a bigint) fails
 * before anything is sent, naming the place in the output.
 */
import assert from "node:assert/strict";
import { type ExactNumber, exactNumber, Flow, type FlowWorker } from "../../mod.ts";
import { isUnstorableOutput, unstorableOutputMessage } from "../../src/task/report.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** 10^1,000,000: a JSON number, but beyond the 131,072 digits numeric keeps before the point. */
const TOO_BIG = "1e1000000";

const flow = new Flow<{ n: number; bad?: boolean }>({
  slug: "unstorable",
  maxAttempts: 2,
  baseDelay: 1,
}).step(
  { slug: "work" },
  (input): { n: number | ExactNumber } => ({ n: input.bad ? exactNumber(TOO_BIG) : input.n }),
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
    assert.match(task.error_message, /^output could not be stored \(SQLSTATE 22003\): /);
    assert.match(task.error_message, /value overflows numeric format/);
    assert.doesNotMatch(task.error_message, /1e1000000/, "the output is not quoted");
    assert.deepEqual(logs.filter((l) => /complete_task failed/.test(l.event)), []);
    const failed = logs.filter((l) => l.event === "task failed");
    assert.equal(failed.length, 2);
    assert.ok(
      logs.some((l) => l.event === "output could not be stored" && l.fields.code === "22003"),
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
    assert.match((await taskRow(sql, runs[13])).error_message, /SQLSTATE 22003/);
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
      /^step bigint_out\.count returned a value JSON cannot hold: output\.total is a bigint, .*exactNumber\(n\).*String\(n\); a step's output must be JSON/,
    );
  } finally {
    await stopAll(workers);
  }
});

db.test("U+0000, a lone surrogate or NaN in an output fails the attempt naming its place, before anything is sent", async ({ sql, url }) => {
  // The types let a string or a number through; what is in it only the worker can see.
  const kinds = ["nul", "surrogate", "nan"] as const;
  const flawed = new Flow<{ kind: (typeof kinds)[number] }>({ slug: "flawed_out", maxAttempts: 1 })
    .step({ slug: "make" }, (input) => ({
      rows: [{ ok: "fine" }, {
        note: input.kind === "nul"
          ? "secret\u0000"
          : input.kind === "surrogate"
          ? "secret\ud800"
          : "",
        ratio: input.kind === "nan" ? 0 / 0 : 1,
      }],
    }));
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flawed, { connectionString: url });
    const runs = await Promise.all(kinds.map((kind) => startRun(sql, "flawed_out", { kind })));
    const messages = [];
    for (const run of runs) {
      assert.equal((await waitForRun(sql, run, 10_000)).status, "failed");
      messages.push((await taskRow(sql, run)).error_message);
    }
    const prefix = "step flawed_out.make returned a value JSON cannot hold: ";
    assert.deepEqual(messages.map((m) => m.slice(0, m.indexOf(",", prefix.length))), [
      `${prefix}output.rows[1].note is a string with U+0000`,
      `${prefix}output.rows[1].note is a string with a lone surrogate (half of a UTF-16 pair)`,
      `${prefix}output.rows[1].ratio is NaN`,
    ]);
    for (const message of messages) assert.doesNotMatch(message, /secret/);
    // Found by the worker: no completion was tried, so none failed in the database.
    assert.deepEqual(logs.filter((l) => l.event === "output could not be stored"), []);
  } finally {
    await stopAll(workers);
  }
});
