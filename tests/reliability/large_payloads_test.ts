/**
 * Large payloads through a worker limited like an Edge isolate: a process of its own with a V8
 * heap of 256 MB (`bench/payloads_worker.ts`). A 10 MB output arrives exactly (compared in SQL),
 * a 100,000-element map and its aggregate complete, a 5 MB run input reaches its steps; a payload
 * over `maxPayloadBytes` fails its task at once naming the size, the bound and the fix; and a run
 * input far beyond what the isolate could parse fails its task while the worker stays up (before
 * the bound, the worker parsed it and died of it, and so did the next one, on every retry).
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  type IsolateWorker,
  settled,
  startInputRun,
  startIsolateWorker,
  startMapRun,
  startOutputRun,
} from "../../bench/payloads.ts";

const db = testDatabase(import.meta.url);
const MiB = 2 ** 20;

async function withWorker(
  url: string,
  options: { maxPayloadBytes?: number; heapMb?: number },
  body: (worker: IsolateWorker) => Promise<void>,
): Promise<void> {
  const worker = await startIsolateWorker(url, { heapMb: 256, ...options });
  try {
    await body(worker);
    assert.equal(
      await Promise.race([worker.exited, Promise.resolve("running")]),
      "running",
      `the worker is still up (stderr: ${worker.stderr().slice(-500)})`,
    );
  } finally {
    await worker.stop();
  }
}

async function task(sql: postgres.Sql, run: string, step: string) {
  const [row] = await sql<{ status: string; attempts_count: number; error_message: string }[]>`
    select status, attempts_count, error_message from pgflow.step_tasks
    where run_id = ${run}::uuid and step_slug = ${step}`;
  return row;
}

db.test("a 10 MB output arrives exactly; a 5 MB run input reaches both its steps", async ({ sql, url }) => {
  await withWorker(url, {}, async () => {
    const run = await startOutputRun(sql, { mb: 10, shape: "records" });
    assert.equal(await settled(sql, run), "completed");
    const records = Math.round(10 * MiB / 100);
    // The same records built in SQL, compared as jsonb compares.
    const [check] = await sql<{ same: boolean; bytes: number; measured: unknown }[]>`
      select ss.output = (
               select jsonb_agg(jsonb_build_object('id', i, 'name', 'record ' || i,
                                                   'tags', '["alpha", "beta"]'::jsonb,
                                                   'score', i * 0.5, 'ok', i % 2 = 0) order by i)
               from generate_series(0, ${records - 1}::integer) i) as same,
             octet_length(ss.output::text) as bytes,
             (select m.output from pgflow.step_states m
              where m.run_id = ss.run_id and m.step_slug = 'measure') as measured
      from pgflow.step_states ss where ss.run_id = ${run}::uuid and ss.step_slug = 'make'`;
    assert.ok(check.bytes > 8 * MiB, `the output is ${check.bytes} bytes`);
    assert.equal(check.same, true, "the stored output equals the records built in SQL");
    assert.equal(check.measured, records, "the dependent step received every record");

    const input = await startInputRun(sql, 5);
    assert.equal(await settled(sql, input), "completed");
    const [keys] = await sql<{ n: number; first: unknown; again: unknown }[]>`
      select (select count(*)::integer from jsonb_object_keys(r.input)) as n,
             r.output -> 'again' as again,
             (select output from pgflow.step_states
              where run_id = r.run_id and step_slug = 'first') as first
      from pgflow.runs r where r.run_id = ${input}::uuid`;
    assert.ok(keys.n >= 5 * 1024, `${keys.n} keys`);
    assert.equal(keys.first, keys.n, "the root step got the whole run input");
    assert.equal(keys.again, keys.n, "ctx.flowInput gave the whole run input");
  });
});

db.test("a 100,000-element map and its aggregate complete", async ({ sql, url }) => {
  await withWorker(url, {}, async () => {
    const n = 100_000;
    const run = await startMapRun(sql, n);
    try {
      assert.equal(await settled(sql, run, 300_000), "completed");
    } finally {
      await sql`select pgflow.cancel_run(${run}::uuid) where exists (
                  select 1 from pgflow.runs where run_id = ${run}::uuid and status = 'started')`;
    }
    const [row] = await sql<{ sum: string; same: boolean; tasks: number }[]>`
      select r.output ->> 'sum' as sum,
             (select ss.output = (select jsonb_agg(2 * i order by i) from generate_series(1, ${n}::integer) i)
              from pgflow.step_states ss where ss.run_id = r.run_id and ss.step_slug = 'double') as same,
             (select count(*)::integer from pgflow.step_tasks t
              where t.run_id = r.run_id and t.step_slug = 'double' and t.status = 'completed') as tasks
      from pgflow.runs r where r.run_id = ${run}::uuid`;
    assert.equal(row.tasks, n);
    assert.equal(row.same, true, "the aggregate holds every element's output in order");
    assert.equal(row.sum, String(n * (n + 1)));
  });
});

db.test("a payload over maxPayloadBytes fails its task naming the size, the bound and the fix", async ({ sql, url }) => {
  await withWorker(url, { maxPayloadBytes: MiB }, async () => {
    const output = await startOutputRun(sql, { mb: 2, shape: "records" });
    const input = await startInputRun(sql, 2);
    assert.equal(await settled(sql, output), "failed");
    assert.equal(await settled(sql, input), "failed");
    const made = await task(sql, output, "make");
    assert.equal(made.status, "failed");
    assert.equal(made.attempts_count, 1);
    assert.match(
      made.error_message,
      /^output of task payload_output\.make\[0\] is [\d,]+ bytes of JSON, over the worker's maxPayloadBytes \(1,048,576\): keep large data in Storage or a table and pass a reference .*raise maxPayloadBytes/,
    );
    const first = await task(sql, input, "first");
    assert.equal(first.status, "failed");
    assert.match(
      first.error_message,
      /^input of task payload_input\.first\[0\] is [\d,]+ bytes of JSON, over the worker's maxPayloadBytes \(1,048,576\)/,
    );
    // Nothing of either was stored or passed on.
    const [stored] = await sql<{ n: number }[]>`
      select count(*)::integer as n from pgflow.step_states
      where run_id in (${output}::uuid, ${input}::uuid) and output is not null`;
    assert.equal(stored.n, 0);
  });
});

db.test("a run input the isolate could not parse fails its task; the worker stays up", async ({ sql, url }) => {
  // 40 MB of small records under a 64 MB heap: parsed, about ten times that heap (a 120 MB
  // input under 256 MB shows the same, at three times the suite's time).
  await withWorker(url, { heapMb: 64 }, async (worker) => {
    const run = await startInputRun(sql, 40, true);
    assert.equal(await settled(sql, run), "failed");
    assert.match(
      (await task(sql, run, "first")).error_message,
      /^input of task payload_input\.first\[0\] is [\d,]+ bytes of JSON, over the worker's maxPayloadBytes \(10,485,760\)/,
    );
    // The worker still takes work.
    const small = await startOutputRun(sql, { mb: 0.01, shape: "records" });
    assert.equal(await settled(sql, small), "completed");
    assert.ok(worker.peakRss() < 160 * MiB, `peak RSS ${worker.peakRss()} bytes`);
  });
});
