import assert from "node:assert/strict";
import { Flow, FlowDefinitionError } from "../../mod.ts";

const base = new Flow<{ id: string }>({ slug: "demo_flow", maxAttempts: 3, timeout: 30 });

Deno.test("the builder is immutable: each call returns a new flow", () => {
  const one = base.step({ slug: "a" }, (input) => input.id);
  const two = one.step({ slug: "b", dependsOn: ["a"] }, (deps) => deps.a.length);
  assert.notEqual(one, base);
  assert.notEqual(two, one);
  assert.deepEqual(base.stepOrder, []);
  assert.deepEqual(one.stepOrder, ["a"]);
  assert.deepEqual(two.stepOrder, ["a", "b"]);
  // Branching from the same parent does not leak steps between branches.
  const other = one.step({ slug: "c" }, () => 1);
  assert.deepEqual(other.stepOrder, ["a", "c"]);
  assert.deepEqual(two.stepOrder, ["a", "b"]);
});

Deno.test("stepOrder, definitions and options are frozen", () => {
  const flow = base.step({ slug: "a", if: { id: "x" }, maxAttempts: 2 }, (input) => input.id);
  assert.ok(Object.isFrozen(flow.stepOrder));
  assert.ok(Object.isFrozen(flow.options));
  const step = flow.getStepDefinition("a");
  assert.ok(Object.isFrozen(step));
  assert.ok(Object.isFrozen(step.dependencies));
  assert.ok(Object.isFrozen(step.options));
  assert.ok(step.requiredInputPattern.defined && Object.isFrozen(step.requiredInputPattern.value));
  assert.throws(() => (flow.stepOrder as string[]).push("x"), TypeError);
});

Deno.test("step definitions keep slug, index, kind, dependencies and set options only", () => {
  const flow = new Flow<{ n: number }>({ slug: "kinds" })
    .array({ slug: "items" }, (input) => [input.n])
    .map({ slug: "double", array: "items", timeout: 10 }, (item) => item * 2)
    .step(
      { slug: "sum", dependsOn: ["double", "items"], whenExhausted: "skip" },
      (deps) => deps.double.length,
    );
  assert.deepEqual(
    flow.steps().map((step) => [step.slug, step.index, step.kind, step.dependencies]),
    [
      ["items", 0, "array", []],
      ["double", 1, "map", ["items"]],
      ["sum", 2, "single", ["double", "items"]],
    ],
  );
  assert.deepEqual(flow.getStepDefinition("double").options, { timeout: 10 });
  assert.deepEqual(flow.getStepDefinition("items").options, {});
  assert.equal(flow.getStepDefinition("sum").whenExhausted, "skip");
  assert.equal("whenUnmet" in flow.getStepDefinition("sum"), false);
});

Deno.test("flow options keep only what was set", () => {
  assert.deepEqual(base.options, { maxAttempts: 3, timeout: 30 });
  assert.deepEqual(new Flow({ slug: "bare" }).options, {});
});

Deno.test("handlers run with the input and context they are given", async () => {
  const flow = base.step({ slug: "a" }, (input) => ({ upper: input.id.toUpperCase() }));
  const handler = flow.getStepDefinition("a").handler;
  assert.deepEqual(await handler({ id: "x" }, {} as never), { upper: "X" });
});

Deno.test("invalid flow slugs and options are rejected", () => {
  assert.throws(() => new Flow({ slug: "bad-slug" }), /flow slug "bad-slug".*"bad_slug"/);
  assert.throws(() => new Flow({ slug: "f", maxAttempts: 0 }), /maxAttempts is 0.*between 1/);
  assert.throws(() => new Flow({ slug: "f", baseDelay: 0.5 }), /baseDelay is 0.5/);
  assert.throws(() => new Flow({ slug: "f", timeout: 2 }), /timeout is 2.*between 3/);
  assert.throws(
    () => new Flow({ slug: "f", startDelay: 1 } as never),
    /unknown option "startDelay"/,
  );
});

Deno.test("step option ranges mirror SQL", () => {
  const ok = base
    .step({ slug: "a", maxAttempts: 1, baseDelay: 1, timeout: 3, startDelay: 0 }, () => 1);
  assert.deepEqual(ok.getStepDefinition("a").options, {
    maxAttempts: 1,
    baseDelay: 1,
    timeout: 3,
    startDelay: 0,
  });
  const bad: [string, number][] = [
    ["maxAttempts", 0],
    ["maxAttempts", 1.5],
    ["baseDelay", 0],
    ["timeout", 2],
    ["startDelay", -1],
    ["startDelay", Number.NaN],
  ];
  for (const [name, value] of bad) {
    assert.throws(
      () => base.step({ slug: "a", [name]: value }, () => 1),
      (error: Error) =>
        error instanceof FlowDefinitionError && error.message.includes(`${name} is`) &&
        error.message.includes('step "a"'),
      `${name}=${value}`,
    );
  }
});

Deno.test("step slugs are validated and unique, ignoring case", () => {
  const flow = base.step({ slug: "classify" }, () => 1);
  assert.throws(() => base.step({ slug: "run" }, () => 1), /reserved/);
  assert.throws(() => base.step({ slug: "a__b" }, () => 1), /write "a_b" instead/);
  assert.throws(
    () => flow.step({ slug: "classify" } as never, () => 1),
    /already has a step "classify"; give the new step another slug/,
  );
  assert.throws(
    () => flow.step({ slug: "Classify" }, () => 1),
    /"Classify" differs from existing step "classify" only in case/,
  );
});

Deno.test("dependencies must exist, be listed once, and map takes at most one", () => {
  const flow = base.step({ slug: "a" }, () => [1]);
  assert.throws(
    () => flow.step({ slug: "b", dependsOn: ["nope"] } as never, () => 1),
    /depends on "nope", which is not a step of this flow yet; define it first \(known steps: a\)/,
  );
  assert.throws(
    () => flow.step({ slug: "b", dependsOn: ["a", "a"] }, () => 1),
    /dependsOn lists "a" twice/,
  );
  assert.throws(
    () => flow.map({ slug: "m", dependsOn: ["a"] } as never, () => 1),
    /unknown option "dependsOn"; a map step takes its one dependency as array/,
  );
  assert.throws(
    () => flow.map({ slug: "m", array: ["a"] } as never, () => 1),
    /array must name one step/,
  );
  assert.throws(() => flow.map({ slug: "m", array: "zzz" } as never, () => 1), /"zzz"/);
  // A forward reference is impossible, so every flow is acyclic by construction.
  assert.throws(() => base.step({ slug: "x", dependsOn: ["x"] } as never, () => 1), /"x"/);
});

Deno.test("conditions: whenUnmet needs if or ifNot; patterns must be plain JSON", () => {
  assert.throws(
    () => base.step({ slug: "a", whenUnmet: "fail" } as never, () => 1),
    /whenUnmet: "fail" only applies to a condition; add if or ifNot, or remove whenUnmet/,
  );
  const withIf = base.step({ slug: "a", if: { id: "x" }, whenUnmet: "skip-cascade" }, () => 1);
  assert.equal(withIf.getStepDefinition("a").whenUnmet, "skip-cascade");
  const withIfNot = base.step({ slug: "a", ifNot: { id: "x" }, whenUnmet: "fail" }, () => 1);
  assert.deepEqual(withIfNot.getStepDefinition("a").forbiddenInputPattern, {
    defined: true,
    value: { id: "x" },
  });
  assert.throws(
    () => base.step({ slug: "a", if: { id: new Date() } } as never, () => 1),
    /if pattern is not plain JSON at \$\.id/,
  );
  assert.throws(
    () => base.step({ slug: "a", whenExhausted: "retry" } as never, () => 1),
    /whenExhausted is "retry"; write one of "fail", "skip", "skip-cascade"/,
  );
});

Deno.test("a null pattern is different from no pattern", () => {
  const flow = new Flow<{ id: string | null }>({ slug: "nulls" })
    .step({ slug: "a" }, () => 1)
    .step({ slug: "b", dependsOn: ["a"], ifNot: null as never }, () => 2);
  assert.deepEqual(flow.getStepDefinition("a").requiredInputPattern, { defined: false });
  assert.deepEqual(flow.getStepDefinition("b").forbiddenInputPattern, {
    defined: true,
    value: null,
  });
});

Deno.test("unknown options and bad handlers are rejected", () => {
  assert.throws(
    () => base.step({ slug: "a", maxAttempt: 3 } as never, () => 1),
    /unknown option "maxAttempt"; use one of slug, dependsOn, maxAttempts/,
  );
  assert.throws(
    () => base.step({ slug: "a" }, "nope" as never),
    /handler must be a function, got string/,
  );
});

Deno.test("every builder method refuses options that are not an object, or that hold a key it does not take, naming both", () => {
  const child = new Flow<{ id: string }>({ slug: "opt_child" }).step({ slug: "x" }, () => 1);
  const methods: [string, (options: never) => unknown, string][] = [
    ["step", (o) => base.step(o, () => 1), '{ slug: "my_step" }'],
    ["array", (o) => base.array(o, () => []), '{ slug: "my_step" }'],
    ["map", (o) => base.map(o, () => 1), '{ slug: "my_step" }'],
    ["subflow", (o) => base.subflow(o), '{ slug: "my_step", flow: otherFlow }'],
    ["subflowMap", (o) => base.subflowMap(o), '{ slug: "my_step", flow: otherFlow }'],
    ["waitForEvent", (o) => base.waitForEvent(o), '{ slug: "approval", event: "approved" }'],
    ["sleep", (o) => base.sleep(o), '{ slug: "pause", for: "2 days" }'],
  ];
  for (const [method, add, sample] of methods) {
    for (const bad of [null, "a", 3]) {
      assert.throws(() => add(bad as never), (error: Error) => {
        assert.ok(error instanceof FlowDefinitionError, method);
        assert.equal(
          error.message,
          `flow "demo_flow": .${method}() needs an options object such as ${sample}`,
        );
        return true;
      });
    }
    const options = { slug: "s", flow: child, event: "e", for: 5, array: "a", nope: 1 };
    assert.throws(
      () => add(options as never),
      new RegExp(`^FlowDefinitionError: flow "demo_flow", step "s": unknown option "\\w+"`),
      method,
    );
  }
});

Deno.test("getStepDefinition of an unknown step names the known ones", () => {
  const flow = base.step({ slug: "a" }, () => 1);
  assert.throws(
    () => flow.getStepDefinition("zz" as never),
    /flow "demo_flow" has no step "zz"; known steps: a/,
  );
});

Deno.test("the platform's Flow is the DSL's, preset: every flow it builds is one of its class", async () => {
  const { Flow: DslFlow } = await import("../../dsl.ts");
  const built = new Flow<{ id: string }>({ slug: "preset_class" })
    .array({ slug: "a" }, (input) => [input.id])
    .map({ slug: "b", array: "a" }, (item) => item.length);
  assert.ok(built instanceof Flow, "a step keeps the platform's class");
  assert.ok(built instanceof DslFlow, "which is the DSL's Flow");
  const dslOnly = new DslFlow<{ id: string }>({ slug: "dsl_class" }).step({ slug: "a" }, () => 1);
  assert.ok(!(dslOnly instanceof Flow), "the DSL's own Flow is not the platform's");
});
