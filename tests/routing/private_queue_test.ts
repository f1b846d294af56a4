import assert from "node:assert/strict";
import { Flow, privateQueueName, RoutingError, validateSlug, withStepQueues } from "../../mod.ts";

interface Case {
  readonly description: string;
  readonly flow_slug: string;
  readonly step_slug: string;
  readonly step_index: number;
  readonly expected_queue?: string;
  readonly expected_error?: boolean;
}

const table: { readonly cases: readonly Case[] } = JSON.parse(
  await Deno.readTextFile(new URL("../fixtures/private_queue_names.json", import.meta.url)),
);

Deno.test("the shared case table is well-formed", () => {
  assert.ok(table.cases.length >= 10);
  for (const c of table.cases) {
    validateSlug(c.flow_slug);
    validateSlug(c.step_slug);
    assert.ok((c.expected_queue === undefined) !== (c.expected_error === undefined), c.description);
  }
  // The edge cases the SQL resolver must agree on are all present.
  const lengths = table.cases.map((c) => c.expected_queue?.length);
  assert.ok(lengths.includes(47), "a name of exactly 47 characters");
  assert.ok(
    table.cases.some((c) => c.expected_queue?.endsWith(`__${c.step_index}`)),
    "index fallback",
  );
  assert.ok(table.cases.some((c) => c.expected_error), "an error case");
  assert.ok(table.cases.some((c) => c.flow_slug !== c.flow_slug.toLowerCase()), "mixed case");
});

for (const c of table.cases) {
  Deno.test(`privateQueueName: ${c.description}`, () => {
    if (c.expected_error) {
      assert.throws(
        () => privateQueueName(c.flow_slug, c.step_slug, c.step_index),
        (error: Error) =>
          error instanceof RoutingError && error.message.includes(c.flow_slug) &&
          error.message.includes("routeFlow()"),
      );
    } else {
      assert.equal(privateQueueName(c.flow_slug, c.step_slug, c.step_index), c.expected_queue);
    }
  });
}

Deno.test("privateQueueName rejects a negative or fractional index", () => {
  assert.throws(() => privateQueueName("f", "s", -1), RoutingError);
  assert.throws(() => privateQueueName("f", "s", 1.5), RoutingError);
});

Deno.test("withStepQueues names each step's queue by its definition index", () => {
  const long = "validate_shipping_address2";
  const flow = new Flow<{ id: string }>({ slug: "Order_Processing_V12" })
    .step({ slug: "fetch" }, (input) => input.id)
    .step({ slug: long, dependsOn: ["fetch"] }, (deps) => deps.fetch);
  const stepQueued = withStepQueues(flow);
  assert.equal(stepQueued.mode, "step");
  assert.equal(stepQueued.flow, flow);
  assert.equal(stepQueued.slug, "Order_Processing_V12");
  assert.deepEqual(stepQueued.queues, {
    fetch: "order_processing_v12__fetch",
    [long]: "order_processing_v12__1",
  });
  assert.deepEqual(Object.keys(stepQueued.queues), ["fetch", long]);
  assert.ok(Object.isFrozen(stepQueued) && Object.isFrozen(stepQueued.queues));
});

Deno.test("withStepQueues rejects an empty flow and a flow slug too long for any name", () => {
  assert.throws(() => withStepQueues(new Flow({ slug: "empty" })), /has no steps; add steps first/);
  const slug = "f".repeat(46);
  const flow = new Flow<{ id: string }>({ slug }).step({ slug: "a" }, (i) => i.id);
  assert.throws(() => withStepQueues(flow), /too long for private step queues/);
});
