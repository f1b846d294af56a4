/**
 * `runFlowInMemory`: dependencies, maps, conditions and skips, retries on a fake clock, failure
 * after maxAttempts, the worker's context, and outputs after their JSON round trip.
 */
import assert from "node:assert/strict";
import { Flow, RetryAfter, type StandardSchemaV1 } from "../../mod.ts";
import { fakeClock, runFlowInMemory } from "../../testing.ts";

Deno.test("dependencies get the object of their dependencies' outputs; the run output is the leaves'", async () => {
  const flow = new Flow<{ n: number }>({ slug: "mem_deps" })
    .step({ slug: "a" }, (i) => i.n + 1)
    .step({ slug: "b" }, (i) => i.n * 10)
    .step({ slug: "sum", dependsOn: ["b", "a"] }, (d) => ({ keys: Object.keys(d), sum: d.a + d.b }))
    .step({ slug: "side", dependsOn: ["a"] }, async (d, ctx) => ({
      a: d.a,
      run: await ctx.flowInput,
      attempt: ctx.attempt,
      step: ctx.stepTask.step_slug,
    }));
  const result = await runFlowInMemory(flow, { n: 2 });
  assert.equal(result.status, "completed");
  assert.deepEqual(result.output, {
    sum: { keys: ["a", "b"], sum: 23 },
    side: { a: 3, run: { n: 2 }, attempt: 1, step: "side" },
  });
  assert.deepEqual(result.steps.a, {
    status: "completed",
    output: 3,
    attempts: [{ taskIndex: 0, attempt: 1, startedAt: 0, outcome: "completed" }],
  });
});

Deno.test("a map runs one task per element and outputs them in index order; an empty map completes", async () => {
  const flow = new Flow<{ text: string }>({ slug: "mem_map" })
    .array({ slug: "split" }, (i) => i.text.split(" ").filter(Boolean))
    .map(
      { slug: "len", array: "split" },
      (word, ctx) => `${ctx.stepTask.task_index}:${word.length}`,
    )
    .step({ slug: "joined", dependsOn: ["len"] }, (d) => d.len.join(","));
  const result = await runFlowInMemory(flow, { text: "a bb ccc" });
  assert.deepEqual(result.output, { joined: "0:1,1:2,2:3" });
  assert.equal(result.steps.len.attempts.length, 3);
  const empty = await runFlowInMemory(flow, { text: "" });
  assert.deepEqual(empty.output, { joined: "" });
  assert.deepEqual(empty.steps.len.attempts, []);
  const root = new Flow<number[]>({ slug: "mem_root_map" }).map({ slug: "sq" }, (n) => n * n);
  assert.deepEqual((await runFlowInMemory(root, [1, 2, 3])).output, { sq: [1, 4, 9] });
});

Deno.test("conditions are containment on the run input or the dependency outputs; skips and cascades", async () => {
  const flow = new Flow<{ plan: string; tags: string[] }>({ slug: "mem_conditions" })
    .step({ slug: "pro", if: { plan: "pro" } }, () => "pro")
    .step({ slug: "tagged", if: { tags: ["vip"] }, whenUnmet: "skip-cascade" }, () => "vip")
    .step({ slug: "after_vip", dependsOn: ["tagged"] }, (d) => d.tagged)
    .step({ slug: "report", dependsOn: ["pro"] }, (d) => ({ pro: d.pro ?? "none" }))
    .step({ slug: "not_free", dependsOn: ["report"], ifNot: { report: { pro: "none" } } }, () => 1);
  const free = await runFlowInMemory(flow, { plan: "free", tags: ["a"] });
  assert.equal(free.status, "completed");
  assert.equal(free.steps.pro.status, "skipped");
  assert.equal(free.steps.pro.skipReason, "condition_unmet");
  assert.equal(free.steps.tagged.skipReason, "condition_unmet");
  assert.equal(free.steps.after_vip.skipReason, "dependency_skipped");
  assert.deepEqual(free.steps.report.output, { pro: "none" });
  assert.equal(free.steps.not_free.skipReason, "condition_unmet");
  assert.deepEqual(free.output, {});
  const pro = await runFlowInMemory(flow, { plan: "pro", tags: ["x", "vip"] });
  assert.deepEqual(pro.output, { after_vip: "vip", not_free: 1 });

  const strict = new Flow<{ ok: boolean }>({ slug: "mem_unmet_fail" })
    .step({ slug: "gate", if: { ok: true }, whenUnmet: "fail" }, () => 1)
    .step({ slug: "next", dependsOn: ["gate"] }, () => 2);
  const failed = await runFlowInMemory(strict, { ok: false });
  assert.equal(failed.status, "failed");
  assert.equal(failed.output, null);
  assert.equal(failed.steps.gate.status, "failed");
  assert.match(failed.error!, /^\[CONDITION_UNMET\] step gate/);
  assert.equal(failed.steps.next.status, "created");
});

Deno.test("retries wait base_delay * 2^(attempt-1) on the fake clock, then the step fails the run", async () => {
  const calls: number[] = [];
  const flow = new Flow<{ id: string }>({ slug: "mem_retry", maxAttempts: 4, baseDelay: 5 })
    .step({ slug: "flaky" }, (_i, ctx) => {
      calls.push(ctx.attempt);
      if (ctx.attempt < 3) throw new Error(`try ${ctx.attempt} failed`);
      return "ok";
    })
    .step({ slug: "always", dependsOn: ["flaky"], maxAttempts: 2 }, () => {
      throw new Error("down");
    });
  const clock = fakeClock(1_000);
  const started = performance.now();
  const result = await runFlowInMemory(flow, { id: "x" }, { clock });
  assert.ok(performance.now() - started < 60_000, "nothing waited for real delays of seconds");
  assert.deepEqual(calls, [1, 2, 3]);
  assert.deepEqual(result.steps.flaky.attempts, [
    {
      taskIndex: 0,
      attempt: 1,
      startedAt: 1_000,
      outcome: "failed",
      error: "try 1 failed",
      retryDelay: 5,
    },
    {
      taskIndex: 0,
      attempt: 2,
      startedAt: 6_000,
      outcome: "failed",
      error: "try 2 failed",
      retryDelay: 10,
    },
    { taskIndex: 0, attempt: 3, startedAt: 16_000, outcome: "completed" },
  ]);
  assert.equal(result.status, "failed");
  assert.equal(result.error, "down");
  assert.equal(result.steps.always.status, "failed");
  assert.deepEqual(result.steps.always.attempts.map((a) => [a.attempt, a.retryDelay]), [
    [1, 5],
    [2, undefined],
  ]);
  assert.equal(clock.now(), 21_000);
});

Deno.test("whenExhausted skips the step (and with skip-cascade its dependents); overrides replace handlers", async () => {
  const flow = new Flow<{ id: string }>({ slug: "mem_exhausted", maxAttempts: 1 })
    .step({ slug: "optional", whenExhausted: "skip" }, () => "real")
    .step({ slug: "uses", dependsOn: ["optional"] }, (d) => d.optional ?? "fallback")
    .step({ slug: "chain", whenExhausted: "skip-cascade" }, () => 1)
    .step({ slug: "tail", dependsOn: ["chain"] }, (d) => d.chain);
  const fail = () => {
    throw new Error("boom");
  };
  const result = await runFlowInMemory(flow, { id: "1" }, {
    handlers: { optional: fail, chain: fail },
  });
  assert.equal(result.status, "completed");
  assert.equal(result.steps.optional.skipReason, "handler_failed");
  assert.equal(result.steps.optional.error, "boom");
  assert.equal(result.steps.tail.skipReason, "dependency_skipped");
  assert.deepEqual(result.output, { uses: "fallback" });
});

Deno.test("outputs make the worker's JSON round trip; unstorable ones fail the attempt", async () => {
  const flow = new Flow<{ id: string }>({ slug: "mem_json", maxAttempts: 1 })
    // deno-lint-ignore no-explicit-any
    .step({ slug: "date" }, () => ({ at: new Date(0) as any, gone: undefined }))
    // deno-lint-ignore no-explicit-any
    .step({ slug: "nothing" }, () => undefined as any)
    .step({ slug: "seen", dependsOn: ["date", "nothing"] }, (d) => ({ ...d }));
  const result = await runFlowInMemory(flow, { id: "1" });
  assert.deepEqual(result.output, {
    seen: { date: { at: "1970-01-01T00:00:00.000Z" }, nothing: null },
  });
  const bad = new Flow<{ id: string }>({ slug: "mem_bad_json", maxAttempts: 1 })
    // deno-lint-ignore no-explicit-any
    .step({ slug: "nan" }, () => ({ n: NaN as any }));
  const failed = await runFlowInMemory(bad, { id: "1" });
  assert.equal(failed.status, "failed");
  assert.match(
    failed.error!,
    /step mem_bad_json\.nan returned a value JSON cannot hold: output\.n/,
  );
  const array = new Flow<{ id: string }>({ slug: "mem_bad_array", maxAttempts: 1 })
    // deno-lint-ignore no-explicit-any
    .array({ slug: "list" }, () => "no" as any);
  assert.match((await runFlowInMemory(array, { id: "1" })).error!, /returned string, not an array/);
});

Deno.test("ctx.sql and ctx.supabase throw unless stubs are given; context, env and signal are passed", async () => {
  const controller = new AbortController();
  const flow = new Flow<{ id: string }, { greeting: string }>({ slug: "mem_ctx", maxAttempts: 1 })
    .step({ slug: "ctx" }, (_i, ctx) => ({
      greeting: ctx.greeting,
      env: ctx.env.REGION ?? null,
      sameSignal: ctx.signal === controller.signal,
      queue: ctx.stepTask.queue_name,
    }))
    .step({ slug: "db", dependsOn: ["ctx"] }, async (_d, ctx) => (await ctx.sql`select 1`).length);
  const result = await runFlowInMemory(flow, { id: "1" }, {
    context: { greeting: "hi" },
    env: { REGION: "eu" },
    signal: controller.signal,
  });
  assert.deepEqual(result.steps.ctx.output, {
    greeting: "hi",
    env: "eu",
    sameSignal: true,
    queue: "mem_ctx",
  });
  assert.equal(result.status, "failed");
  assert.match(result.error!, /ctx\.sql is not available in runFlowInMemory/);
});

Deno.test("an input that fails the flow's schema fails the run without a retry", async () => {
  const schema: StandardSchemaV1<unknown, { id: string }> = {
    "~standard": {
      version: 1,
      vendor: "test",
      validate: (value: unknown) =>
        typeof (value as { id?: unknown })?.id === "string"
          ? { value: value as { id: string } }
          : { issues: [{ message: "id must be a string", path: ["id"] }] },
    },
  };
  const flow = new Flow({ slug: "mem_schema", input: schema })
    .step({ slug: "a" }, (i) => i.id);
  const result = await runFlowInMemory(flow, { id: 5 } as unknown as { id: string });
  assert.equal(result.status, "failed");
  assert.equal(result.steps.a.attempts.length, 1);
  assert.match(result.error!, /input failed its schema/);
});

Deno.test("RetryAfter defers on the fake clock without counting the attempt, up to 100 times", async () => {
  const flow = new Flow<{ deferrals: number }>({ slug: "mem_defer", maxAttempts: 2, baseDelay: 60 })
    .step({ slug: "call" }, (input, ctx) => {
      if (ctx.attempt <= input.deferrals) throw new RetryAfter({ afterMs: 1_500 });
      if (ctx.attempt === input.deferrals + 1) throw new Error("one real failure");
      return ctx.attempt;
    });
  const clock = fakeClock(0);
  const result = await runFlowInMemory(flow, { deferrals: 2 }, { clock });
  // Two deferrals, then a counted failure (1 of maxAttempts 2) and a success.
  assert.equal(result.status, "completed");
  assert.deepEqual(
    result.steps.call.attempts.map((a) => [a.attempt, a.startedAt, a.outcome, a.retryDelay]),
    [
      [1, 0, "deferred", 2],
      [2, 2_000, "deferred", 2],
      [3, 4_000, "failed", 60],
      [4, 64_000, "completed", undefined],
    ],
  );
  // A handler that always defers: 100 deferrals, then each deferral counts.
  const always = await runFlowInMemory(flow, { deferrals: 1_000 }, { clock: fakeClock(0) });
  assert.equal(always.status, "failed");
  const attempts = always.steps.call.attempts;
  assert.equal(attempts.filter((a) => a.outcome === "deferred").length, 100);
  assert.deepEqual(attempts.slice(100).map((a) => [a.attempt, a.outcome]), [
    [101, "failed"],
    [102, "failed"],
  ]);
  assert.equal(
    always.error,
    "deferred 100 times, the most one task may be without it counting as a failed attempt; " +
      "retry after 2 s",
  );
});
