// Type tests for child-flow steps, run by `deno check` (see type_harness_test.ts): the child's
// input is checked against what the step picks, and its output is the step's output.
import { expectTypeOf } from "expect-type";
import { Flow, routeFlow } from "../../mod.ts";

const enrich = new Flow<{ id: string }>({ slug: "enrich_v1", alias: "enrich" })
  .step({ slug: "profile" }, (input) => ({ name: input.id, score: 1 }))
  .step({ slug: "tags", dependsOn: ["profile"] }, (deps) => [deps.profile.name]);

const parent = new Flow<{ customer: { id: string }; ids: string[] }>({ slug: "parent_v1" })
  .subflow({
    slug: "one",
    flow: enrich,
    input: (input) => {
      expectTypeOf(input).toEqualTypeOf<{ customer: { id: string }; ids: string[] }>();
      return { id: input.customer.id };
    },
  })
  .array({ slug: "ids" }, (input) => input.ids)
  .subflowMap({
    slug: "many",
    array: "ids",
    flow: routeFlow(enrich, { queues: { profile: "q", tags: "q" } }),
    input: (id) => ({ id }),
  })
  .step({ slug: "after", dependsOn: ["one", "many"] }, (deps) => {
    // The child run's output (its leaf steps) is the step's output; a map gives an array of them.
    expectTypeOf(deps.one).toEqualTypeOf<{ tags: string[] }>();
    expectTypeOf(deps.many).toEqualTypeOf<{ tags: string[] }[]>();
    return deps.many.length;
  });
expectTypeOf(parent.slug).toEqualTypeOf<string>();

// A step whose input already is the child's input needs no mapping.
new Flow<{ id: string }>({ slug: "pass_through_v1" }).subflow({ slug: "same", flow: enrich });
new Flow<{ id: string }[]>({ slug: "pass_map_v1" }).subflowMap({ slug: "each", flow: enrich });

new Flow<{ other: number }>({ slug: "needs_mapping_v1" })
  // @ts-expect-error: the run input is not the child's input, so input is required
  .subflow({ slug: "bad", flow: enrich });

new Flow<{ customer: { id: number } }>({ slug: "wrong_type_v1" })
  // @ts-expect-error: the child needs a string id
  .subflow({ slug: "bad", flow: enrich, input: (input) => ({ id: input.customer.id }) });

new Flow<{ id: string }>({ slug: "unknown_dep_v1" })
  // @ts-expect-error: dependsOn names only defined steps
  .subflow({ slug: "bad", flow: enrich, dependsOn: ["nope"] });
