import assert from "node:assert/strict";
import { Flow, routeFlow, RoutingError } from "../../mod.ts";

const flow = new Flow<{ threadId: string }>({ slug: "thread_triage_v1" })
  .step({ slug: "classify" }, (input) => ({ label: input.threadId }))
  .step({ slug: "enrich", dependsOn: ["classify"] }, (deps) => deps.classify.label)
  .step({ slug: "deliverSlack", dependsOn: ["enrich"] }, (deps) => ({ sent: deps.enrich }));

Deno.test("routeFlow keeps the flow and returns a frozen route map in step order", () => {
  const routed = routeFlow(flow, {
    queues: {
      deliverSlack: "slack_delivery",
      enrich: "thread_processing",
      classify: "thread_processing",
    },
  });
  assert.equal(routed.mode, "routed");
  assert.equal(routed.slug, "thread_triage_v1");
  assert.equal(routed.flow, flow);
  assert.deepEqual(Object.keys(routed.queues), ["classify", "enrich", "deliverSlack"]);
  assert.equal(routed.queues.enrich, "thread_processing");
  assert.ok(Object.isFrozen(routed) && Object.isFrozen(routed.queues));
});

Deno.test("routeFlow names missing and unknown steps", () => {
  assert.throws(
    () =>
      routeFlow(flow, {
        queues: { classify: "q", enrich: "q", typo: "q" },
      } as never),
    (error: Error) =>
      error instanceof RoutingError &&
      error.message.includes('missing step(s) "deliverSlack"') &&
      error.message.includes('unknown step(s) "typo"') &&
      error.message.includes('The steps are "classify", "enrich", "deliverSlack"'),
  );
  assert.throws(
    () => routeFlow(flow, { queues: { classify: "q" } } as never),
    /missing step\(s\) "enrich", "deliverSlack"/,
  );
});

Deno.test("routeFlow validates every queue name at once", () => {
  assert.throws(
    () =>
      routeFlow(flow, {
        queues: { classify: "q", enrich: "Thread-Processing", deliverSlack: "q" },
      }),
    /queue of step "enrich" "Thread-Processing" is invalid.*write "thread_processing" instead/,
  );
  assert.throws(
    () => routeFlow(flow, { queues: { classify: "q", enrich: "q", deliverSlack: "a__b" } }),
    /"__", which is reserved/,
  );
});

Deno.test("routeFlow rejects a missing map, an empty flow and a non-flow", () => {
  assert.throws(() => routeFlow(flow, {} as never), /needs \{ queues:/);
  assert.throws(
    () => routeFlow(new Flow({ slug: "empty" }), { queues: {} }),
    /the flow has no steps/,
  );
  assert.throws(() => routeFlow({} as never, { queues: {} }), /needs a Flow/);
});
