/**
 * `.waitForEvent()` and `.sleep()` in the DSL: what they record (the shape's wait), their output
 * types, and the errors for a bad event name, duration, path or onTimeout, each naming the value
 * and showing a valid one.
 */
import assert from "node:assert/strict";
import { expectTypeOf } from "expect-type";
import { durationSeconds, eventPayload, Flow, FlowDefinitionError } from "../../mod.ts";
import { extractFlowShape } from "../../tools.ts";
import { runFlowInMemory } from "../../testing.ts";
import type { StepOutput } from "../../mod.ts";

const approval = new Flow<{ orderId: string }>({ slug: "dsl_wait" })
  .step({ slug: "submit" }, (input) => input.orderId)
  .waitForEvent({
    slug: "decision",
    dependsOn: ["submit"],
    event: "decided",
    key: "$.orderId",
    payload: eventPayload<{ approved: boolean }>(),
    timeout: "3 days",
    onTimeout: { value: { approved: false, timedOut: true } },
  })
  .sleep({ slug: "pause", dependsOn: ["decision"], for: "2 days" })
  .step({ slug: "done", dependsOn: ["decision", "pause"] }, (deps) => {
    expectTypeOf(deps.pause).toEqualTypeOf<string>();
    return deps.decision.approved;
  });

Deno.test("waiting steps record their wait in the shape and type their output", () => {
  const shape = extractFlowShape(approval);
  assert.deepEqual(shape.steps.map((s) => s.wait), [
    undefined,
    {
      kind: "event",
      event: "decided",
      key: "$.orderId",
      seconds: 259200,
      onTimeout: { value: { approved: false, timedOut: true } },
    },
    { kind: "sleep", seconds: 172800 },
    undefined,
  ]);
  assert.deepEqual(shape.steps[1].dependencies, ["submit"]);
  expectTypeOf<StepOutput<typeof approval, "decision">>().toEqualTypeOf<
    { approved: boolean } | { readonly approved: false; readonly timedOut: true }
  >();
  const until = new Flow<{ at: string }>({ slug: "dsl_until" }).sleep({ slug: "s", until: "$.at" });
  assert.deepEqual(extractFlowShape(until).steps[0].wait, { kind: "sleep", until: "$.at" });
  assert.throws(
    () => approval.getStepDefinition("decision").handler(null, {} as never),
    /completes in SQL/,
  );
});

Deno.test("durations: seconds or text, whole seconds up to a year", () => {
  assert.equal(durationSeconds(90, "t"), 90);
  assert.equal(durationSeconds("90 s", "t"), 90);
  assert.equal(durationSeconds("15 minutes", "t"), 900);
  assert.equal(durationSeconds("3 days", "t"), 259200);
  assert.equal(durationSeconds("2w", "t"), 1209600);
  for (const bad of ["3 fortnights", "soon", -1, 1.5, "400 days", "0.5 s", null]) {
    assert.throws(
      () => durationSeconds(bad, "timeout"),
      (e: Error) =>
        e instanceof FlowDefinitionError && e.message.includes(JSON.stringify(bad)) &&
        /"3 days"/.test(e.message),
      String(bad),
    );
  }
});

Deno.test("bad wait options are refused, naming the value and the fix", () => {
  const flow = new Flow<{ id: string }>({ slug: "dsl_bad" });
  const cases: [() => unknown, RegExp][] = [
    [
      () => flow.waitForEvent({ slug: "e", event: "has space" }),
      /event must be a name.*"has space"/,
    ],
    [
      () => flow.waitForEvent({ slug: "e", event: "ok", key: "orderId" }),
      /key must be a JSON path such as "\$\.orderId", got "orderId"/,
    ],
    [
      () => flow.waitForEvent({ slug: "e", event: "ok", onTimeout: { value: 1 } }),
      /onTimeout needs a timeout; add timeout: "3 days"/,
    ],
    [
      () =>
        flow.waitForEvent({ slug: "e", event: "ok", timeout: "1 day", onTimeout: "skip" as never }),
      /onTimeout must be "fail" or \{ value: <JSON> \}, got "skip"/,
    ],
    [
      () => flow.waitForEvent({ slug: "e", event: "ok", payload: 3 as never }),
      /payload.*not a Standard Schema/,
    ],
    [
      () => flow.waitForEvent({ slug: "e", event: "ok", maxAttempts: 2 } as never),
      /unknown option "maxAttempts"/,
    ],
    [() => flow.sleep({ slug: "s" } as never), /exactly one of for: "2 days" and until/],
    [() => flow.sleep({ slug: "s", for: "1 day", until: "$.x" } as never), /exactly one of/],
    [() => flow.sleep({ slug: "s", for: "tomorrow" as never }), /"tomorrow" is not a duration/],
    [
      () => flow.sleep({ slug: "s", for: "1 day", dependsOn: ["nope" as never] }),
      /depends on "nope"/,
    ],
  ];
  for (const [make, message] of cases) {
    assert.throws(
      make,
      (e: Error) => e instanceof FlowDefinitionError && message.test(e.message),
      String(message),
    );
  }
});

Deno.test("in memory, a waiting step's event is a handler override returning the payload", async () => {
  const flow = new Flow<{ orderId: string }>({ slug: "dsl_mem", maxAttempts: 1 })
    .waitForEvent({ slug: "decision", event: "decided", payload: eventPayload<{ ok: boolean }>() })
    .step({ slug: "ship", dependsOn: ["decision"] }, (deps) => deps.decision.ok);
  const approved = await runFlowInMemory(flow, { orderId: "A" }, {
    handlers: { decision: () => ({ ok: true }) },
  });
  assert.equal(approved.status, "completed");
  assert.deepEqual(approved.output, { ship: true });
  const forgotten = await runFlowInMemory(flow, { orderId: "A" });
  assert.equal(forgotten.status, "failed");
  assert.match(forgotten.error ?? "", /in runFlowInMemory, give it a handler in options.handlers/);
});
