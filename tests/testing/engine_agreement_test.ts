/**
 * `runFlowInMemory` agrees with the engine: the shapes of tests/sql/shape_roundtrip_test.ts
 * (single, array and map steps; dependencies written in any order; `if` / `ifNot` patterns; every
 * `whenUnmet` and `whenExhausted` mode), with handlers, run once in memory and once by real
 * workers against the test database, end with the same run status and output and the same status,
 * output and skip reason for every step. Failing runs are chains, so no parallel step's timing
 * decides what the engine reports.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { type AnyFlow, Flow, type FlowWorker } from "../../mod.ts";
import { runFlowInMemory } from "../../testing.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

type Input = { plan: string; tags: string[]; n: number; ok: boolean; on: boolean };

const shapes = new Flow<Input>({ slug: "agree_shapes", maxAttempts: 1 })
  .step({ slug: "Zeta" }, (i) => ({ n: i.n, at: "root" }))
  .array(
    { slug: "list", dependsOn: ["Zeta"] },
    (d) => Array.from({ length: d.Zeta.n }, (_, k) => k),
  )
  .map({ slug: "sq", array: "list" }, (k) => ({ k, sq: k * k }))
  .step({ slug: "pro", if: { plan: "pro" } }, (i) => i.plan)
  .step({ slug: "not_x", ifNot: { tags: ["x"] }, whenUnmet: "skip-cascade" }, (i) => i.tags)
  .step({ slug: "x_tail", dependsOn: ["not_x"] }, (d) => d.not_x.length)
  .step({ slug: "a_1", dependsOn: ["sq", "pro", "Zeta"] }, (d) => ({
    keys: Object.keys(d),
    total: d.sq.reduce((sum, e) => sum + e.sq, 0),
    pro: d.pro ?? null,
  }))
  .step({ slug: "big", dependsOn: ["a_1"], if: { a_1: { total: 5 } } }, (d) => d.a_1.total)
  .array({ slug: "maybe", if: { on: true } }, (i) => i.tags)
  .map({ slug: "each", array: "maybe" }, (tag) => tag.toUpperCase())
  .step({ slug: "final", dependsOn: ["each", "big"] }, (d) => ({ each: d.each ?? null }));

const exhausted = new Flow<{ fail: string[] }>({ slug: "agree_exhausted", maxAttempts: 1 })
  .step({ slug: "optional", whenExhausted: "skip" }, (i) => {
    if (i.fail.includes("optional")) throw new Error("optional failed");
    return "fine";
  })
  .step({ slug: "uses", dependsOn: ["optional"] }, (d) => d.optional ?? "fallback")
  .step({ slug: "chain", whenExhausted: "skip-cascade", maxAttempts: 2 }, (i, ctx) => {
    if (i.fail.includes("chain") || ctx.attempt === 1 && i.fail.includes("chain_once")) {
      throw new Error(`chain failed on attempt ${ctx.attempt}`);
    }
    return ctx.attempt;
  })
  .step({ slug: "tail", dependsOn: ["chain"] }, (d) => d.chain)
  .array({ slug: "items" }, (i) => i.fail)
  .map({ slug: "per_item", array: "items", whenExhausted: "skip" }, (name) => {
    if (name === "item") throw new Error("item failed");
    return name.length;
  })
  .step({ slug: "after_items", dependsOn: ["per_item"] }, (d) => d.per_item ?? []);

const failing = new Flow<{ ok: boolean; boom: boolean }>({ slug: "agree_failing", maxAttempts: 1 })
  .step({ slug: "gate", if: { ok: true }, whenUnmet: "fail" }, () => "open")
  .step({ slug: "boom", dependsOn: ["gate"] }, (d, ctx) => {
    if (ctx.stepTask.step_slug === "boom" && d.gate === "open") throw new Error("boom");
    return 1;
  })
  .step({ slug: "never", dependsOn: ["boom"] }, () => "never");

const rootMap = new Flow<string[]>({ slug: "agree_root_map", maxAttempts: 1 })
  .map({ slug: "upper", if: ["b"] }, (s) => s.toUpperCase())
  .step({ slug: "count", dependsOn: ["upper"] }, (d) => d.upper?.length ?? -1);

const CASES: readonly [AnyFlow, unknown][] = [
  [shapes, { plan: "pro", tags: ["y"], n: 2, ok: true, on: true }],
  [shapes, { plan: "free", tags: ["x"], n: 0, ok: true, on: false }],
  [shapes, { plan: "pro", tags: [], n: 3, ok: true, on: true }],
  [exhausted, { fail: [] }],
  [exhausted, { fail: ["optional", "chain", "item"] }],
  [exhausted, { fail: ["chain_once"] }],
  [failing, { ok: false, boom: false }],
  [failing, { ok: true, boom: true }],
  [rootMap, ["a", "b"]],
  [rootMap, ["a"]],
];

interface Outcome {
  status: string;
  output: unknown;
  steps: Record<string, { status: string; output: unknown; skipReason: string | null }>;
}

async function engineOutcome(sql: postgres.Sql, flow: AnyFlow, input: unknown): Promise<Outcome> {
  const runId = await startRun(sql, flow.slug, input);
  const run = await waitForRun(sql, runId);
  const rows = await sql<
    { step_slug: string; status: string; output: unknown; skip_reason: string | null }[]
  >`
    select step_slug, status, output, skip_reason from pgflow.step_states where run_id = ${runId}::uuid`;
  const steps: Outcome["steps"] = {};
  for (const r of rows) {
    steps[r.step_slug] = { status: r.status, output: r.output, skipReason: r.skip_reason };
  }
  return { status: run.status, output: run.output, steps };
}

async function memoryOutcome(flow: AnyFlow, input: unknown): Promise<Outcome> {
  const result = await runFlowInMemory(flow, input);
  const steps: Outcome["steps"] = {};
  for (const [slug, s] of Object.entries(result.steps)) {
    steps[slug] = { status: s.status, output: s.output, skipReason: s.skipReason ?? null };
  }
  return { status: result.status, output: result.output, steps };
}

db.test("runs in memory end as the engine's runs do, step by step", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    for (const flow of [shapes, exhausted, failing, rootMap]) {
      await startWorker(workers, flow, { connectionString: url, maxConcurrent: 4 });
    }
    for (const [flow, input] of CASES) {
      const [engine, memory] = await Promise.all([
        engineOutcome(sql, flow, input),
        memoryOutcome(flow, input),
      ]);
      assert.deepEqual(memory, engine, `${flow.slug} with ${JSON.stringify(input)}`);
    }
  } finally {
    await stopAll(workers);
  }
});
