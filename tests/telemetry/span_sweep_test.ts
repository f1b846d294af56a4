/**
 * pgflow.sweep_ended_spans finds the runs that ended without a worker's report (cancel_run, stalled
 * recovery failing a run, a wait timing out in the tick, an event completing the last step, a
 * child run cancelled with its parent) and hands out their spans and their ended steps' once; a
 * page at a time, one sweeper at a time, never the spans the report path took, never runs that
 * ended before the first sweep.
 */
import assert from "node:assert/strict";
import { testDatabase, type TestDb } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { type EndedSpanRow, endedSpans } from "../../src/telemetry/ended_spans.ts";
import { runTrace, stepSpanId, stepTraceparent } from "../../src/telemetry/span_ids.ts";

const db = testDatabase(import.meta.url);
type Sql = TestDb["sql"];

const sweep = (sql: Sql, maxScanned = 1000) =>
  sql<EndedSpanRow[]>`select * from pgflow.sweep_ended_spans(${maxScanned})`;
const keys = (rows: readonly EndedSpanRow[]) =>
  rows.map((r) => `${r.run_id} ${r.step_slug} ${r.status}`).sort();

/** Each test starts with no sweep yet: the first call of the test records its `since`. */
async function freshSweep(sql: Sql): Promise<void> {
  await sql`delete from pgflow.span_sweep`;
  await sweep(sql);
}

db.test("a cancelled run's span and its steps' are swept once", async ({ sql }) => {
  await freshSweep(sql);
  await defineFlow(sql, "sweep_cancel", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  const [run] = await sql`select run_id from pgflow.start_flow('sweep_cancel', '{}')`;
  const worker = await registerWorker(sql, "sweep_cancel");
  await readAndStart(sql, "sweep_cancel", worker, [["sweep_cancel", "a"]]);
  assert.deepEqual(keys(await sweep(sql)), [], "a started run has no span yet");

  await sql`select pgflow.cancel_run(${run.run_id}, 'operator said so')`;
  const rows = await sweep(sql);
  assert.deepEqual(keys(rows), [
    `${run.run_id}  cancelled`,
    `${run.run_id} a cancelled`,
    `${run.run_id} b cancelled`,
  ]);
  assert.equal(rows.at(-1)!.step_slug, "", "the run's span after its steps'");
  const [times] = await sql`
    select (extract(epoch from started_at) * 1e6)::bigint::text as started,
           (extract(epoch from cancelled_at) * 1e6)::bigint::text as ended
    from pgflow.runs where run_id = ${run.run_id}`;
  const runRow = rows.find((r) => r.step_slug === "")!;
  assert.deepEqual([String(runRow.started_us), String(runRow.ended_us)], [
    times.started,
    times.ended,
  ]);
  assert.deepEqual(keys(await sweep(sql)), [], "handed out once");
});

db.test("a run failed by stalled recovery is swept with its failed step", async ({ sql }) => {
  await freshSweep(sql);
  await defineFlow(sql, "sweep_stall", [{ slug: "a", timeout: 5 }], { maxAttempts: 1 });
  const [run] = await sql`select run_id from pgflow.start_flow('sweep_stall', '{}')`;
  const worker = await registerWorker(sql, "sweep_stall");
  await readAndStart(sql, "sweep_stall", worker, [["sweep_stall", "a"]]);
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour'
            where run_id = ${run.run_id}`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 1);
  const [after] = await sql`select status from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(after.status, "failed");
  assert.deepEqual(keys(await sweep(sql)), [`${run.run_id}  failed`, `${run.run_id} a failed`]);
});

db.test("what a report claimed is not swept again, nor are runs ended before the first sweep", async ({ sql }) => {
  await defineFlow(sql, "sweep_mixed", [{ slug: "only" }]);
  const worker = await registerWorker(sql, "sweep_mixed");
  const [before] = await sql`select run_id from pgflow.start_flow('sweep_mixed', '{}')`;
  await sql`select pgflow.cancel_run(${before.run_id})`;
  await freshSweep(sql);

  const [reported] = await sql`select run_id from pgflow.start_flow('sweep_mixed', '{}')`;
  const [t] = await readAndStart(sql, "sweep_mixed", worker, [["sweep_mixed", "only"]]);
  await sql`select pgflow.complete_task(${reported.run_id}, 'only', 0, '1', ${t.attempt})`;
  const claimed = await sql<EndedSpanRow[]>`
    select * from pgflow.claim_ended_spans(${[reported.run_id]}::uuid[], ${["only"]}::text[])`;
  assert.equal(claimed.length, 2, "the report path took the run's span and its step's");
  assert.deepEqual(keys(await sweep(sql)), [], "nothing left for the sweep");
});

db.test(
  "a pass goes a page at a time and the next pass finds a run that ended since",
  async ({ sql }) => {
    await freshSweep(sql);
    await defineFlow(sql, "sweep_pages", [{ slug: "only" }]);
    const runs: string[] = [];
    for (let i = 0; i < 3; i++) {
      const [run] = await sql`select run_id from pgflow.start_flow('sweep_pages', '{}')`;
      runs.push(run.run_id);
    }
    await sql`select pgflow.cancel_run(${runs[0]})`;
    await sql`select pgflow.cancel_run(${runs[2]})`;
    const swept: string[] = [];
    // Pages of one run: the first pass sees runs[1] still started.
    for (let page = 0; page < 3; page++) {
      swept.push(...(await sweep(sql, 1)).filter((r) => r.step_slug === "").map((r) => r.run_id));
    }
    assert.deepEqual(swept.sort(), [runs[0], runs[2]].sort());
    await sql`select pgflow.cancel_run(${runs[1]})`;
    const later: string[] = [];
    for (let page = 0; page < 4; page++) {
      later.push(...(await sweep(sql, 1)).filter((r) => r.step_slug === "").map((r) => r.run_id));
    }
    assert.deepEqual(later, [runs[1]], "the next pass takes the run that ended since");
  },
  { fresh: true },
);

db.test("a second sweeper returns at once while one sweeps", async ({ sql, connect }) => {
  await freshSweep(sql);
  await defineFlow(sql, "sweep_two", [{ slug: "only" }]);
  const [run] = await sql`select run_id from pgflow.start_flow('sweep_two', '{}')`;
  await sql`select pgflow.cancel_run(${run.run_id})`;
  const other = connect();
  await other.begin(async (tx) => {
    const first = await tx<EndedSpanRow[]>`select * from pgflow.sweep_ended_spans(1000)`;
    assert.equal(first.length, 2);
    assert.deepEqual(keys(await sweep(sql)), [], "skipped, not waited for");
  });
  assert.deepEqual(keys(await sweep(sql)), [], "claimed once");
});

db.test("a bad page size or horizon is refused, naming it", async ({ sql }) => {
  await assert.rejects(sql`select * from pgflow.sweep_ended_spans(0)`, /max_scanned .* got 0/);
  await assert.rejects(
    sql`select * from pgflow.sweep_ended_spans(10, interval '-1 day')`,
    /horizon must be a positive interval/,
  );
});

db.test("runs the tick fails (a wait's timeout) or an event completes are swept", async ({ sql }) => {
  await freshSweep(sql);
  await defineFlow(sql, "sweep_wait", [{ slug: "approve" }]);
  await sql`select pgflow._set_wait('sweep_wait', 'approve',
    ${sql.json({ kind: "event", event: "approved", key: "$.id", seconds: 3600 })})`;
  const [timedOut] = await sql`select run_id from pgflow.start_flow('sweep_wait', '{"id": "t"}')`;
  const [answered] = await sql`select run_id from pgflow.start_flow('sweep_wait', '{"id": "a"}')`;
  assert.deepEqual(keys(await sweep(sql)), [], "both wait");
  await sql`select pgflow.send_event('approved', '{}', key => 'a')`;
  await sql`select pgflow.fire_due_schedules(clock_timestamp() + interval '3601 s')`;
  assert.deepEqual(
    keys(await sweep(sql)),
    [
      `${answered.run_id}  completed`,
      `${answered.run_id} approve completed`,
      `${timedOut.run_id}  failed`,
      `${timedOut.run_id} approve failed`,
    ].sort(),
  );
});

db.test("a child run cancelled with its parent is swept, under the parent's step", async ({ sql }) => {
  await freshSweep(sql);
  await defineFlow(sql, "sweep_parent", [{ slug: "fan_out" }]);
  await defineFlow(sql, "sweep_child", [{ slug: "only" }]);
  const caller = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const [parent] = await sql`select run_id from pgflow.start_flow('sweep_parent', '{}',
    traceparent => ${caller})`;
  // A child as a child-flow step starts it: its traceparent names the parent's step span.
  const [child] = await sql`select run_id from pgflow.start_flow('sweep_child', '{}',
    traceparent => ${stepTraceparent(parent.run_id, "fan_out", caller)})`;
  await sql`update pgflow.runs set parent_run_id = ${parent.run_id}, parent_step_slug = 'fan_out',
              parent_task_index = 0 where run_id = ${child.run_id}`;
  await sql`select pgflow.cancel_run(${parent.run_id})`;
  const rows = await sweep(sql);
  assert.deepEqual(
    keys(rows),
    [
      `${child.run_id}  cancelled`,
      `${child.run_id} only cancelled`,
      `${parent.run_id}  cancelled`,
      `${parent.run_id} fan_out cancelled`,
    ].sort(),
  );
  const spans = endedSpans(rows);
  const childRun = spans.find((s) => s.name === "pgflow.run sweep_child")!;
  assert.equal(childRun.traceId, "0af7651916cd43dd8448eb211c80319c", "the caller's trace");
  assert.equal(childRun.parentSpanId, stepSpanId(parent.run_id, "fan_out"));
  const parentRun = spans.find((s) => s.name === "pgflow.run sweep_parent")!;
  assert.equal(parentRun.spanId, runTrace(parent.run_id, caller).runSpanId);
  assert.equal(parentRun.parentSpanId, "b7ad6b7169203331");
  for (const span of spans) assert.equal(span.status, "unset", `${span.name}: cancelled is unset`);
});
