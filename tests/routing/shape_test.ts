import assert from "node:assert/strict";
import { Flow, routeFlow, RoutingError, withStepQueues } from "../../mod.ts";
import { extractFlowOptions, extractFlowShape, extractRoutePlan } from "../../tools.ts";
import { flowQueueName } from "../../src/routing/flow_queue.ts";

function build(order: "ab" | "ba") {
  const deps = order === "ab" ? ["a", "b"] as const : ["b", "a"] as const;
  return new Flow<{ id: string; tags: string[] }>({ slug: "Shape_Demo", maxAttempts: 4 })
    .step({ slug: "a", timeout: 9 }, (input) => input.id)
    .array({ slug: "b", if: { tags: ["x"], id: "1" } }, (input) => input.tags)
    .map({ slug: "c", array: "b", ifNot: { b: ["y"] }, whenUnmet: "fail" }, (tag) => tag.length)
    .step(
      { slug: "d", dependsOn: deps, whenExhausted: "skip-cascade", startDelay: 5 },
      (d) => d.a,
    );
}

Deno.test("extractFlowShape: steps in order, sorted deps, resolved modes, wrapped patterns", () => {
  assert.deepEqual(extractFlowShape(build("ba")), {
    steps: [
      {
        slug: "a",
        index: 0,
        stepType: "single",
        dependencies: [],
        whenUnmet: "skip",
        whenExhausted: "fail",
        requiredInputPattern: { defined: false },
        forbiddenInputPattern: { defined: false },
      },
      {
        slug: "b",
        index: 1,
        stepType: "single",
        dependencies: [],
        whenUnmet: "skip",
        whenExhausted: "fail",
        requiredInputPattern: { defined: true, value: { id: "1", tags: ["x"] } },
        forbiddenInputPattern: { defined: false },
      },
      {
        slug: "c",
        index: 2,
        stepType: "map",
        dependencies: ["b"],
        whenUnmet: "fail",
        whenExhausted: "fail",
        requiredInputPattern: { defined: false },
        forbiddenInputPattern: { defined: true, value: { b: ["y"] } },
      },
      {
        slug: "d",
        index: 3,
        stepType: "single",
        dependencies: ["a", "b"],
        whenUnmet: "skip",
        whenExhausted: "skip-cascade",
        requiredInputPattern: { defined: false },
        forbiddenInputPattern: { defined: false },
      },
    ],
  });
});

Deno.test("extractFlowShape is deterministic text, whatever order deps and keys were written", () => {
  const one = JSON.stringify(extractFlowShape(build("ab")));
  const two = JSON.stringify(extractFlowShape(build("ba")));
  assert.equal(one, two);
  assert.equal(JSON.stringify(extractFlowShape(build("ab"))), one);
  assert.ok(one.indexOf('"id":"1"') < one.indexOf('"tags"'), "pattern keys are sorted");
});

Deno.test("the shape carries no options and no routes; options come separately", () => {
  const flow = build("ab");
  const routed = routeFlow(flow, { queues: { a: "q1", b: "q1", c: "q2", d: "q2" } });
  assert.deepEqual(extractFlowShape(routed), extractFlowShape(flow));
  assert.deepEqual(extractFlowShape(withStepQueues(flow)), extractFlowShape(flow));
  assert.ok(!JSON.stringify(extractFlowShape(flow)).includes("timeout"));
  assert.deepEqual(extractFlowOptions(flow), {
    flow: { maxAttempts: 4 },
    steps: { a: { timeout: 9 }, b: {}, c: {}, d: { startDelay: 5 } },
  });
});

Deno.test("extractRoutePlan: flow, step and routed modes", () => {
  const flow = build("ab");
  assert.deepEqual(extractRoutePlan(flow), {
    mode: "flow",
    queues: { a: "shape_demo", b: "shape_demo", c: "shape_demo", d: "shape_demo" },
  });
  assert.deepEqual(extractRoutePlan(withStepQueues(flow)), {
    mode: "step",
    queues: { a: "shape_demo__a", b: "shape_demo__b", c: "shape_demo__c", d: "shape_demo__d" },
  });
  const routed = routeFlow(flow, { queues: { d: "q2", c: "q2", b: "q1", a: "q1" } });
  const plan = extractRoutePlan(routed);
  assert.deepEqual(plan, { mode: "routed", queues: { a: "q1", b: "q1", c: "q2", d: "q2" } });
  assert.equal(JSON.stringify(plan), JSON.stringify(extractRoutePlan(routed)));
  assert.deepEqual(Object.keys(plan.queues), ["a", "b", "c", "d"]);
});

Deno.test("a plain flow whose slug cannot be a queue name has no flow-mode plan", () => {
  const slug = "f".repeat(48);
  const flow = new Flow<{ id: string }>({ slug }).step({ slug: "a" }, (i) => i.id);
  assert.throws(() => extractRoutePlan(flow), RoutingError);
  assert.throws(() => extractRoutePlan(flow), /use a shorter flow slug, or route it/);
  assert.equal(flowQueueName("Thread_Triage_V1"), "thread_triage_v1");
  // Routing it makes it usable.
  assert.equal(extractRoutePlan(routeFlow(flow, { queues: { a: "work" } })).mode, "routed");
});
