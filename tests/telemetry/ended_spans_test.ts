/**
 * pgflow.claim_ended_spans hands each ended span of a run to one caller only (two workers reporting
 * the last tasks at once must not both emit the run's span), with the times of the rows; and
 * endedSpans places them in the run's trace.
 */
import assert from "node:assert/strict";
import { testDatabase, type TestDb } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { type EndedSpanRow, endedSpans } from "../../src/telemetry/ended_spans.ts";
import { runTrace, stepSpanId, stepTraceparent } from "../../src/telemetry/span_ids.ts";

const db = testDatabase(import.meta.url);

const claim = (
  sql: TestDb["sql"],
  runId: string,
  step: string,
) =>
  sql<EndedSpanRow[]>`select * from pgflow.claim_ended_spans(${[runId]}::uuid[], ${[
    step,
  ]}::text[])`;

db.test("each ended span is handed out once, the run's with the last step", async ({ sql }) => {
  await defineFlow(sql, "spans", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  const [run] = await sql`select run_id from pgflow.start_flow('spans', '{}')`;
  const worker = await registerWorker(sql, "spans");

  const [a] = await readAndStart(sql, "spans", worker, [["spans", "a"]]);
  assert.equal((await claim(sql, run.run_id, "a")).length, 0, "a started step has no span yet");
  await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '1', ${a.attempt})`;
  const first = await claim(sql, run.run_id, "a");
  assert.deepEqual(first.map((r) => [r.step_slug, r.status, r.tasks]), [["a", "completed", 1]]);
  assert.equal((await claim(sql, run.run_id, "a")).length, 0, "handed out once");

  const [b] = await readAndStart(sql, "spans", worker, [["spans", "b"]]);
  await sql`select pgflow.complete_task(${run.run_id}, 'b', 0, '2', ${b.attempt})`;
  // Two reports at once, on two connections: each span goes to one of them.
  const [x, y] = await Promise.all([claim(sql, run.run_id, "b"), claim(sql, run.run_id, "b")]);
  const all = [...x, ...y].map((r) => r.step_slug).sort();
  assert.deepEqual(all, ["", "b"], "the run's span and b's, once each");
  const rows = x.length > 0 ? x : y;
  assert.equal(rows.at(-1)!.step_slug, "", "the run's span comes after its steps'");

  const [times] = await sql`
    select (extract(epoch from started_at) * 1e6)::bigint::text as started,
           (extract(epoch from completed_at) * 1e6)::bigint::text as ended
    from pgflow.runs where run_id = ${run.run_id}`;
  const runRow = rows.find((r) => r.step_slug === "")!;
  assert.deepEqual([String(runRow.started_us), String(runRow.ended_us)], [
    times.started,
    times.ended,
  ]);
  assert.ok(BigInt(runRow.started_us) <= BigInt(runRow.ended_us));

  // Pruning the run takes its markers with it.
  await sql`delete from pgflow.step_tasks where run_id = ${run.run_id}`;
  await sql`delete from pgflow.step_states where run_id = ${run.run_id}`;
  await sql`delete from pgflow.runs where run_id = ${run.run_id}`;
  const [left] = await sql`select count(*)::int as n from pgflow.emitted_spans`;
  assert.equal(left.n, 0);
});

db.test("a failed run hands out its span with its failed step's", async ({ sql }) => {
  await defineFlow(sql, "spans_fail", [{ slug: "a" }, { slug: "b", deps: ["a"] }], {
    maxAttempts: 1,
  });
  const [run] = await sql`select run_id from pgflow.start_flow('spans_fail', '{}')`;
  const worker = await registerWorker(sql, "spans_fail");
  const [a] = await readAndStart(sql, "spans_fail", worker, [["spans_fail", "a"]]);
  await sql`select pgflow.fail_task(${run.run_id}, 'a', 0, 'boom', ${a.attempt})`;
  const rows = await claim(sql, run.run_id, "a");
  const bySlug = Object.fromEntries(rows.map((r) => [r.step_slug, r.status]));
  assert.equal(bySlug.a, "failed");
  assert.equal(bySlug[""], "failed");
  assert.equal(bySlug.b, undefined, "b never ran: no span");

  const spans = endedSpans(rows);
  const runSpan = spans.find((s) => s.name === "pgflow.run spans_fail")!;
  assert.equal(runSpan.status, "error");
  assert.equal(runSpan.parentSpanId, undefined, "an untraced run's span is the trace's root");
  assert.equal(runSpan.traceId, run.run_id.replaceAll("-", ""), "its trace id is the run id");
  const step = spans.find((s) => s.name === "pgflow.step spans_fail.a")!;
  assert.equal(step.parentSpanId, runSpan.spanId);
  assert.equal(step.spanId, stepSpanId(run.run_id, "a"));
  assert.equal(step.status, "error");
  for (const span of spans) {
    assert.ok(!JSON.stringify(span).includes("boom"), "no error text in a span");
  }
});

db.test("a child run's span hangs under the step named by its traceparent", async ({ sql }) => {
  await defineFlow(sql, "spans_child", [{ slug: "only" }]);
  const parentRun = crypto.randomUUID();
  const callers = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const traceparent = stepTraceparent(parentRun, "fan_out", callers);
  const [child] = await sql`select run_id from pgflow.start_flow('spans_child', '{}',
    traceparent => ${traceparent})`;
  const worker = await registerWorker(sql, "spans_child");
  const [t] = await readAndStart(sql, "spans_child", worker, [["spans_child", "only"]]);
  await sql`select pgflow.complete_task(${child.run_id}, 'only', 0, '1', ${t.attempt})`;
  const spans = endedSpans(await claim(sql, child.run_id, "only"));
  const runSpan = spans.find((s) => s.name === "pgflow.run spans_child")!;
  assert.equal(runSpan.traceId, "0af7651916cd43dd8448eb211c80319c", "the parent's trace");
  assert.equal(runSpan.parentSpanId, stepSpanId(parentRun, "fan_out"));
  assert.equal(runSpan.spanId, runTrace(child.run_id, traceparent).runSpanId);
});

Deno.test("an unsampled trace's run emits no span", () => {
  const rows: EndedSpanRow[] = [{
    run_id: crypto.randomUUID(),
    step_slug: "",
    status: "completed",
    started_us: "1",
    ended_us: "2",
    flow_slug: "f",
    started_as: null,
    traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00",
    tasks: null,
  }];
  assert.deepEqual(endedSpans(rows), []);
  assert.equal(endedSpans([{ ...rows[0], traceparent: null }]).length, 1);
});

db.test("one claim takes the reports of several runs, each span once", async ({ sql }) => {
  await defineFlow(sql, "spans_many", [{ slug: "only" }]);
  const worker = await registerWorker(sql, "spans_many");
  const runs: string[] = [];
  for (let i = 0; i < 3; i++) {
    const [run] = await sql`select run_id from pgflow.start_flow('spans_many', '{}')`;
    const [t] = await readAndStart(sql, "spans_many", worker, [["spans_many", "only"]]);
    await sql`select pgflow.complete_task(${t.run_id}, 'only', 0, '1', ${t.attempt})`;
    runs.push(run.run_id);
  }
  // The same report twice in a batch (a map step's tasks) is one claim.
  const rows = await sql<EndedSpanRow[]>`select * from pgflow.claim_ended_spans(
    ${[...runs, runs[0]]}::uuid[], ${["only", "only", "only", "only"]}::text[])`;
  assert.deepEqual(
    rows.map((r) => `${r.run_id} ${r.step_slug}`).sort(),
    runs.flatMap((id) => [`${id} `, `${id} only`]).sort(),
  );
  assert.equal(endedSpans(rows).length, 6);
});
