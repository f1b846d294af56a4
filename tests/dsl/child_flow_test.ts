/** Child-flow steps in the DSL: what is recorded, what is refused, and what the shape carries. */
import assert from "node:assert/strict";
import { Flow, FlowDefinitionError } from "../../mod.ts";
import { extractFlowShape } from "../../tools.ts";
import { runFlowInMemory } from "../../testing.ts";

const enrich = new Flow<{ id: string; tags?: string[] }>({ slug: "enrich_v1", alias: "enrich" })
  .step({ slug: "profile" }, (input) => input.id);

Deno.test("the input function is recorded as a template with the paths it picks", () => {
  const flow = new Flow<{ customer: { id: string; tags: string[] } }>({ slug: "p_v1" })
    .subflow({
      slug: "e",
      flow: enrich,
      input: (input) => ({ id: input.customer.id, tags: [input.customer.tags[0], "fixed"] }),
    });
  assert.deepEqual(flow.getStepDefinition("e").child, {
    flow: "enrich_v1",
    input: {
      template: { id: null, tags: [null, "fixed"] },
      refs: [[["id"], ["customer", "id"]], [["tags", "0"], ["customer", "tags", "0"]]],
    },
  });
  assert.deepEqual(extractFlowShape(flow).steps[0].child, flow.getStepDefinition("e").child);
});

Deno.test("without an input function the step's input is the child's; viaAlias starts the alias", () => {
  const flow = new Flow<{ id: string }[]>({ slug: "p_v2" })
    .subflowMap({ slug: "each", flow: enrich, viaAlias: true });
  assert.deepEqual(flow.getStepDefinition("each").child, { flow: "enrich", input: null });
  assert.equal(flow.getStepDefinition("each").kind, "map");
  // A step without a child has no key in the shape, so existing shapes stay as they were.
  const plain = new Flow<{ id: string }>({ slug: "p_v3" }).step({ slug: "a" }, (i) => i.id);
  assert.equal("child" in extractFlowShape(plain).steps[0], false);
});

Deno.test("computing on picked values is refused with an error that says what to do", () => {
  assert.throws(
    () =>
      new Flow<{ n: number; id: string }>({ slug: "p_v4" }).subflow({
        slug: "e",
        flow: enrich,
        input: (input) => ({ id: `${input.id}!` }),
      }),
    (e: unknown) =>
      e instanceof FlowDefinitionError &&
      /flow "p_v4", step "e": the input function may only pick values .* it read id as a value to compute with, which SQL cannot replay\. Compute it in a step before/
        .test(e.message),
  );
  assert.throws(
    () =>
      new Flow<{ ids: string[] }>({ slug: "p_v5" }).subflow({
        slug: "e",
        flow: enrich,
        input: (input) => ({ id: input.ids.join(",") }),
      }),
    /the input function failed when recorded|may only pick values/,
  );
});

Deno.test("bad child options fail naming the step and the fix", () => {
  const noAlias = new Flow<{ id: string }>({ slug: "plain_v1" }).step({ slug: "a" }, (i) => i.id);
  assert.throws(
    () =>
      new Flow<{ id: string }>({ slug: "p_v6" }).subflow({
        slug: "e",
        flow: noAlias,
        viaAlias: true,
      }),
    /flow "p_v6", step "e": viaAlias is set but flow "plain_v1" has no alias/,
  );
  assert.throws(
    () =>
      new Flow<{ id: string }>({ slug: "p_v7" }).subflow(
        { slug: "e", flow: "enrich_v1" } as never,
      ),
    /flow "p_v7", step "e": flow must be the child Flow/,
  );
  assert.throws(
    () =>
      new Flow<{ id: string }>({ slug: "p_v8" }).subflow(
        { slug: "e", flow: enrich, timeout: 5 } as never,
      ),
    /flow "p_v8", step "e": unknown option "timeout"/,
  );
});

Deno.test("runFlowInMemory runs no child flow: a handler override stands in for it", async () => {
  const parent = new Flow<{ id: string }>({ slug: "mem_v1", maxAttempts: 1 })
    .subflow({ slug: "e", flow: enrich })
    .step({ slug: "after", dependsOn: ["e"] }, (deps) => deps.e.profile);
  const without = await runFlowInMemory(parent, { id: "x" });
  assert.equal(without.status, "failed");
  assert.match(
    String(without.steps.e.attempts[0]?.error),
    /runs another flow in SQL, not a handler; in runFlowInMemory, stand in for it with options.handlers/,
  );
  const stubbed = await runFlowInMemory(parent, { id: "x" }, {
    handlers: { e: () => ({ profile: "stub" }) },
  });
  assert.deepEqual(stubbed.output, { after: "stub" });
});
