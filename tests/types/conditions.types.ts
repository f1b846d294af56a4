// Type tests for the condition options of the steps that run no handler (`.waitForEvent()`,
// `.sleep()`, `.subflow()`, `.subflowMap()`), run by `deno check` (see type_harness_test.ts): they
// take `if`, `ifNot`, `whenUnmet` and `whenExhausted` as `.step()` does, with the same effect on
// the step's output type, and none of a task's runtime options.
import { expectTypeOf } from "expect-type";
import { eventPayload, Flow, type Json } from "../../mod.ts";

const child = new Flow<{ id: string }>({ slug: "cond_child_v1" })
  .step({ slug: "done" }, (input) => input.id.length);

const flow = new Flow<{ id: string; kind: string }>({ slug: "cond_v1" })
  .waitForEvent({
    slug: "approval",
    event: "approved",
    payload: eventPayload<{ ok: boolean }>(),
    if: { kind: "order" },
  })
  .waitForEvent({ slug: "strict", event: "x", if: { kind: "a" }, whenUnmet: "fail" })
  .sleep({ slug: "pause", for: "1 day", ifNot: { kind: "rush" }, whenUnmet: "skip-cascade" })
  .subflow({ slug: "one", flow: child, whenExhausted: "skip" })
  .subflow({ slug: "must", flow: child, whenExhausted: "skip-cascade" })
  .array({ slug: "ids" }, (input) => [input.id])
  .subflowMap({
    slug: "many",
    array: "ids",
    flow: child,
    input: (id) => ({ id }),
    if: { ids: ["x"] },
  })
  .step(
    { slug: "after", dependsOn: ["approval", "strict", "pause", "one", "must", "many"] },
    (deps) => {
      // 'skip' (whenUnmet's default, or whenExhausted: 'skip') makes keys optional; a sleep's
      // output is its wake time.
      expectTypeOf(deps).toEqualTypeOf<{
        strict: Json;
        pause: string;
        must: { done: number };
        approval?: { ok: boolean };
        one?: { done: number };
        many?: { done: number }[];
      }>();
      return 1;
    },
  );
expectTypeOf(flow.slug).toEqualTypeOf<string>();

const base = new Flow<{ kind: string }>({ slug: "cond_bad_v1" });

// @ts-expect-error whenUnmet without if/ifNot
base.waitForEvent({ slug: "e", event: "x", whenUnmet: "skip" });
// @ts-expect-error whenUnmet without if/ifNot
base.subflow({ slug: "c", flow: child, input: () => ({ id: "x" }), whenUnmet: "fail" });
// @ts-expect-error whenExhausted has three values
base.sleep({ slug: "s", for: 5, whenExhausted: "retry" });
// @ts-expect-error a wait runs no task: no maxAttempts
base.waitForEvent({ slug: "e", event: "x", maxAttempts: 2 });
// @ts-expect-error a child flow step runs no task: no timeout
base.subflow({ slug: "c", flow: child, input: () => ({ id: "x" }), timeout: 5 });
