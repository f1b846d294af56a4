/**
 * Maps, arrays, conditions and skips with real workers, in every queue mode: a map on a shared
 * queue next to other flows, a map per private step queue, a plain-flow map, and skip cascades
 * that span several queues.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow, withStepQueues } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { archivedMessages, queueMessages } from "../support/engine.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

function wordsFlow(slug: string) {
  return new Flow<{ text: string }>({ slug })
    .array({ slug: "split" }, (i) => i.text.split(" "))
    .map({ slug: "measure", array: "split" }, (word) => word.length)
    .step({ slug: "total", dependsOn: ["measure"] }, (d) => d.measure.reduce((a, b) => a + b, 0));
}

db.test("a map on a shared queue runs beside another flow's steps, in index order", async ({ sql, url }) => {
  const routed = routeFlow(wordsFlow("wc_shared"), {
    queues: { split: "wc_work", measure: "wc_work", total: "wc_final" },
  });
  const other = routeFlow(
    new Flow<{ n: number }>({ slug: "wc_other" }).step({ slug: "double" }, (i) => i.n * 2),
    { queues: { double: "wc_work" } },
  );
  const workers: FlowWorker[] = [];
  await startWorker(workers, [routed, other], {
    connectionString: url,
    queueName: "wc_work",
    maxConcurrent: 4,
  });
  await startWorker(workers, [routed], { connectionString: url, queueName: "wc_final" });
  const run = await startRun(sql, "wc_shared", { text: "a bb ccc dddd" });
  const neighbour = await startRun(sql, "wc_other", { n: 21 });
  assert.deepEqual(await waitForRun(sql, run), { status: "completed", output: { total: 10 } });
  assert.deepEqual(await waitForRun(sql, neighbour), {
    status: "completed",
    output: { double: 42 },
  });
  const [measure] =
    await sql`select output from pgflow.step_states where run_id = ${run} and step_slug = 'measure'`;
  assert.deepEqual(measure.output, [1, 2, 3, 4]);
  const tasks =
    await sql`select distinct queue_name from pgflow.step_tasks where run_id = ${run} and step_slug = 'measure'`;
  assert.deepEqual(tasks.map((t) => t.queue_name), ["wc_work"]);
  await stopAll(workers);
});

db.test("maps work on private step queues and on a plain flow queue; empty arrays complete", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const stepQueued = withStepQueues(wordsFlow("wc_private"));
  for (const stepSlug of ["split", "measure", "total"] as const) {
    await startWorker(workers, stepQueued, { connectionString: url, stepSlug });
  }
  await startWorker(workers, wordsFlow("wc_plain"), { connectionString: url });
  const p = await startRun(sql, "wc_private", { text: "x yy" });
  const f = await startRun(sql, "wc_plain", { text: "zzz" });
  assert.deepEqual(await waitForRun(sql, p), { status: "completed", output: { total: 3 } });
  assert.deepEqual(await waitForRun(sql, f), { status: "completed", output: { total: 3 } });
  const root = new Flow<string[]>({ slug: "wc_root_map" }).map(
    { slug: "upper" },
    (s) => s.toUpperCase(),
  );
  await startWorker(workers, root, { connectionString: url });
  const empty = await startRun(sql, "wc_root_map", []);
  assert.deepEqual(await waitForRun(sql, empty), { status: "completed", output: { upper: [] } });
  const some = await startRun(sql, "wc_root_map", ["a", "b"]);
  assert.deepEqual(await waitForRun(sql, some), {
    status: "completed",
    output: { upper: ["A", "B"] },
  });
  await stopAll(workers);
});

db.test("an .array step that returns a non-array fails with a clear error", async ({ sql, url }) => {
  const flow = new Flow<{ n: number }>({ slug: "wc_bad_array", maxAttempts: 1 })
    // Bypasses the type check on purpose, as JavaScript callers could.
    .array({ slug: "list" }, (i) => ({ n: i.n }) as unknown as number[])
    .map({ slug: "each", array: "list" }, (x) => x);
  const workers: FlowWorker[] = [];
  await startWorker(workers, flow, { connectionString: url });
  const run = await startRun(sql, "wc_bad_array", { n: 1 });
  assert.equal((await waitForRun(sql, run)).status, "failed");
  const [task] =
    await sql`select error_message from pgflow.step_tasks where run_id = ${run} and step_slug = 'list'`;
  assert.equal(task.error_message, "array step wc_bad_array.list returned object, not an array");
  await stopAll(workers);
});

db.test("conditions and exhaustion skip steps across queues; skipped inputs are absent", async ({ sql, url }) => {
  const seen: unknown[] = [];
  const flow = new Flow<{ plan: string }>({ slug: "wc_skips", baseDelay: 1 })
    .step({ slug: "pro", if: { plan: "pro" } }, () => "pro features")
    .step({ slug: "flaky", maxAttempts: 2, whenExhausted: "skip-cascade" }, (): string => {
      throw new Error("always fails");
    })
    .step({ slug: "needsFlaky", dependsOn: ["flaky"] }, (d) => d.flaky)
    .step({ slug: "report", dependsOn: ["pro"] }, (d) => {
      seen.push(d);
      return d.pro ?? "basic";
    });
  const routed = routeFlow(flow, {
    queues: { pro: "wc_q1", flaky: "wc_q2", needsFlaky: "wc_q3", report: "wc_q3" },
  });
  const workers: FlowWorker[] = [];
  for (const queueName of ["wc_q1", "wc_q2", "wc_q3"] as const) {
    await startWorker(workers, [routed], { connectionString: url, queueName });
  }
  await sql`update pgflow.flows set opt_base_delay = 1 where flow_slug = 'wc_skips'`;
  const run = await startRun(sql, "wc_skips", { plan: "free" });
  assert.deepEqual(await waitForRun(sql, run), {
    status: "completed",
    output: { report: "basic" },
  });
  assert.deepEqual(seen, [{}], "the skipped dependency is absent from the input");
  const states =
    await sql`select step_slug, status, skip_reason from pgflow.step_states where run_id = ${run} order by step_slug`;
  assert.deepEqual(states.map((s) => `${s.step_slug}:${s.status}:${s.skip_reason ?? ""}`), [
    "flaky:skipped:handler_failed",
    "needsFlaky:skipped:dependency_skipped",
    "pro:skipped:condition_unmet",
    "report:completed:",
  ]);
  for (const q of ["wc_q1", "wc_q2", "wc_q3"]) {
    assert.equal((await queueMessages(sql, q)).length, 0, `no message left in ${q}`);
  }
  assert.equal(
    (await archivedMessages(sql, "wc_q2")).length,
    1,
    "the exhausted task's message is archived",
  );
  await stopAll(workers);
});
