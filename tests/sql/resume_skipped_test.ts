/**
 * resume_run and skipped steps: what a resume takes over from its source run (every completed
 * step, and every skip a completed step was built on), what it runs again (everything else,
 * skips included), and that no completion can count a step's dependencies out of range.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { makeVisible, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface StepDef {
  slug: string;
  deps?: string[];
  whenExhausted?: "fail" | "skip" | "skip-cascade";
  whenUnmet?: "fail" | "skip" | "skip-cascade";
  /** A containment pattern the run input must match (a root step's `if`). */
  required?: unknown;
}

/** A flow of single steps with one attempt each, on its own queue. */
async function defineFlow(sql: Sql, slug: string, steps: StepDef[]): Promise<void> {
  await sql`select pgflow.create_flow(${slug}, 1, 1, 60)`;
  for (const s of steps) {
    await sql`select pgflow.add_step(
      flow_slug => ${slug}, step_slug => ${s.slug}, deps_slugs => ${s.deps ?? []}::text[],
      when_exhausted => ${s.whenExhausted ?? "fail"}, when_unmet => ${s.whenUnmet ?? "skip"},
      required_input_pattern => ${
      s.required === undefined ? null : sql.json(s.required as never)
    })`;
  }
}

/**
 * Claims the flow's visible tasks and settles those named in `outcomes` (a step slug, or
 * `slug@runId` for one run's task): an Error fails the attempt, anything else is the output.
 * Returns the (run, step) pairs claimed; the messages of the others are made visible again.
 */
async function settle(
  sql: Sql,
  flow: string,
  worker: string,
  outcomes: Record<string, unknown>,
): Promise<string[]> {
  const steps = await sql<{ step_slug: string }[]>`
    select step_slug from pgflow.steps where flow_slug = ${flow}`;
  const pairs = steps.map((s): [string, string] => [flow, s.step_slug]);
  const claimed = (await readAndStart(sql, flow, worker, pairs, 50))
    .filter((t) => t.disposition === "claimed");
  const seen: string[] = [];
  for (const t of claimed) {
    const key = [`${t.step_slug}@${t.run_id}`, t.step_slug!].find((k) => k in outcomes);
    if (key === undefined) {
      await sql`select pgflow.fail_task(${t.run_id}, ${t.step_slug}, ${t.task_index}, 'not settled here', ${t.attempt})`
        .catch(() => {});
      throw new Error(`task ${t.step_slug} of run ${t.run_id} was ready but not expected`);
    }
    const outcome = outcomes[key];
    seen.push(`${t.step_slug}`);
    if (outcome instanceof Error) {
      await sql`select pgflow.fail_task(${t.run_id}, ${t.step_slug}, ${t.task_index}, ${outcome.message}, ${t.attempt})`;
    } else {
      await sql`select pgflow.complete_task(${t.run_id}, ${t.step_slug}, ${t.task_index}, ${
        sql.json(outcome as never)
      }, ${t.attempt})`;
    }
  }
  await makeVisible(sql, flow);
  return seen.sort();
}

async function states(sql: Sql, runId: string) {
  const rows = await sql`
    select step_slug, status, reused, skip_reason, remaining_deps from pgflow.step_states
    where run_id = ${runId} order by step_slug`;
  return Object.fromEntries(rows.map((r) => [r.step_slug, [r.status, r.reused, r.skip_reason]]));
}

async function runRow(sql: Sql, runId: string) {
  const [row] = await sql`
    select status, output, remaining_steps, error_message from pgflow.runs where run_id = ${runId}`;
  return row;
}

db.test("a skip a completed step was built on is taken over: a → b → c, a skipped on failure, b completed, c failed", async ({ sql }) => {
  await defineFlow(sql, "rk_chain", [
    { slug: "a", whenExhausted: "skip" },
    { slug: "b", deps: ["a"] },
    { slug: "c", deps: ["b"] },
  ]);
  const worker = await registerWorker(sql, "rk_chain");
  const [src] = await sql`select run_id from pgflow.start_flow('rk_chain', '{}')`;
  assert.deepEqual(await settle(sql, "rk_chain", worker, { a: new Error("api down") }), ["a"]);
  assert.deepEqual(await settle(sql, "rk_chain", worker, { b: "B" }), ["b"]);
  assert.deepEqual(await settle(sql, "rk_chain", worker, { c: new Error("disk full") }), ["c"]);
  assert.equal((await runRow(sql, src.run_id)).status, "failed");

  const [resumed] = await sql`select run_id, remaining_steps from pgflow.resume_run(${src.run_id})`;
  // b was computed without a's output: a stays skipped (its reason and error kept), b is reused,
  // and only c runs.
  assert.deepEqual(await states(sql, resumed.run_id), {
    a: ["skipped", true, "handler_failed"],
    b: ["completed", true, null],
    c: ["started", false, null],
  });
  assert.equal(resumed.remaining_steps, 1);
  const [a] = await sql`select error_message from pgflow.step_states
                        where run_id = ${resumed.run_id} and step_slug = 'a'`;
  assert.equal(a.error_message, "api down");
  assert.deepEqual(await settle(sql, "rk_chain", worker, { c: "C" }), ["c"]);
  const done = await runRow(sql, resumed.run_id);
  assert.deepEqual([done.status, done.output, done.remaining_steps], ["completed", { c: "C" }, 0]);
  const [{ n }] = await sql`select count(*)::int as n from pgflow.step_tasks
                            where run_id = ${resumed.run_id} and step_slug in ('a', 'b')`;
  assert.equal(n, 0, "no task of a or b in the resumed run");
});

db.test("a skip nothing completed was built on runs again: its handler gets another attempt and its dependents see the output", async ({ sql }) => {
  await defineFlow(sql, "rk_again", [
    { slug: "a", whenExhausted: "skip" },
    { slug: "b", deps: ["a"] },
  ]);
  const worker = await registerWorker(sql, "rk_again");
  const [src] = await sql`select run_id from pgflow.start_flow('rk_again', '{}')`;
  await settle(sql, "rk_again", worker, { a: new Error("api down") });
  await settle(sql, "rk_again", worker, { b: new Error("no enrichment") });
  assert.equal((await runRow(sql, src.run_id)).status, "failed");

  const [resumed] = await sql`select run_id from pgflow.resume_run(${src.run_id})`;
  assert.deepEqual(await states(sql, resumed.run_id), {
    a: ["started", false, null],
    b: ["created", false, null],
  });
  assert.deepEqual(await settle(sql, "rk_again", worker, { a: "A" }), ["a"]);
  const [b] = (await readAndStart(sql, "rk_again", worker, [["rk_again", "b"]]))
    .filter((t) => t.disposition === "claimed");
  assert.deepEqual(b.input, { a: "A" });
  await sql`select pgflow.complete_task(${b.run_id}, 'b', 0, '"B"', ${b.attempt})`;
  assert.deepEqual((await runRow(sql, resumed.run_id)).output, { b: "B" });
});

db.test("a condition's skip is taken over when a completed step was built on it, and decided again otherwise", async ({ sql }) => {
  // a runs only for {"go": true}: the input is {} so it is skipped; b (after a) completes; c
  // (after b) fails. d, a second root with the same condition, has no dependent.
  await defineFlow(sql, "rk_cond", [
    { slug: "a", required: { go: true } },
    { slug: "b", deps: ["a"] },
    { slug: "c", deps: ["b"] },
    { slug: "d", required: { go: true } },
  ]);
  const worker = await registerWorker(sql, "rk_cond");
  const [src] = await sql`select run_id from pgflow.start_flow('rk_cond', '{}')`;
  await settle(sql, "rk_cond", worker, { b: "B" });
  await settle(sql, "rk_cond", worker, { c: new Error("boom") });
  assert.deepEqual(await states(sql, src.run_id), {
    a: ["skipped", false, "condition_unmet"],
    b: ["completed", false, null],
    c: ["failed", false, null],
    d: ["skipped", false, "condition_unmet"],
  });

  const [resumed] = await sql`select run_id from pgflow.resume_run(${src.run_id})`;
  // d is decided again on the same input: skipped again, not reused.
  assert.deepEqual(await states(sql, resumed.run_id), {
    a: ["skipped", true, "condition_unmet"],
    b: ["completed", true, null],
    c: ["started", false, null],
    d: ["skipped", false, "condition_unmet"],
  });
  await settle(sql, "rk_cond", worker, { c: "C" });
  const done = await runRow(sql, resumed.run_id);
  assert.deepEqual([done.status, done.output], ["completed", { c: "C" }]);
});

db.test("a cascade of skips runs again with the step that caused it", async ({ sql }) => {
  // x fails and cascades its skip onto z; y fails after it and fails the run.
  await defineFlow(sql, "rk_cascade", [
    { slug: "x", whenExhausted: "skip-cascade" },
    { slug: "y" },
    { slug: "z", deps: ["x", "y"] },
  ]);
  const worker = await registerWorker(sql, "rk_cascade");
  const [src] = await sql`select run_id from pgflow.start_flow('rk_cascade', '{}')`;
  await settle(sql, "rk_cascade", worker, { x: new Error("x down"), y: new Error("y down") });
  assert.deepEqual(await states(sql, src.run_id), {
    x: ["skipped", false, "handler_failed"],
    y: ["failed", false, null],
    z: ["skipped", false, "dependency_skipped"],
  });

  const [resumed] = await sql`select run_id from pgflow.resume_run(${src.run_id})`;
  assert.deepEqual(await states(sql, resumed.run_id), {
    x: ["started", false, null],
    y: ["started", false, null],
    z: ["created", false, null],
  });
  await settle(sql, "rk_cascade", worker, { x: "X", y: "Y" });
  await settle(sql, "rk_cascade", worker, { z: "Z" });
  const done = await runRow(sql, resumed.run_id);
  assert.deepEqual([done.status, done.output], ["completed", { z: "Z" }]);
});

db.test("completions count down only the dependents still waiting", async ({ sql }) => {
  // A dependent that no longer waits (here completed by hand, as a resume once left one) is not
  // counted down when a dependency of it completes: the counter stays in range and the run ends.
  await defineFlow(sql, "rk_count", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  const worker = await registerWorker(sql, "rk_count");
  const [run] = await sql`select run_id from pgflow.start_flow('rk_count', '{}')`;
  await sql`update pgflow.step_states
            set status = 'completed', remaining_deps = 0, remaining_tasks = 0, output = '"B"',
                started_at = now(), completed_at = now()
            where run_id = ${run.run_id} and step_slug = 'b'`;
  await sql`update pgflow.runs set remaining_steps = 1 where run_id = ${run.run_id}`;
  assert.deepEqual(await settle(sql, "rk_count", worker, { a: "A" }), ["a"]);
  const rows = await sql`select step_slug, remaining_deps from pgflow.step_states
                         where run_id = ${run.run_id} order by step_slug`;
  assert.deepEqual(rows.map((r) => [r.step_slug, r.remaining_deps]), [["a", 0], ["b", 0]]);
  const done = await runRow(sql, run.run_id);
  assert.deepEqual([done.status, done.output], ["completed", { b: "B" }]);
});
