// Type tests for the client, run by `deno check` (see type_harness_test.ts): startFlow takes the
// flow's input type (plain, routed, step-queued, or a slug with a type parameter), waitFor
// resolves to the flow's output (its leaf steps, optional when they may be skipped), events and
// run states are typed per step. Negative checks use `@ts-expect-error`.
import { expectTypeOf } from "expect-type";
import {
  createClient,
  Flow,
  type FlowOutputOf,
  type FlowRun,
  type Json,
  type PgflowClient,
  routeFlow,
  type RunEvent,
  type RunState,
  withStepQueues,
} from "../../mod.ts";

const triage = new Flow<{ threadId: string; text: string }>({ slug: "thread_triage_v1" })
  .step({ slug: "classify" }, (input) => ({ label: input.text, urgent: input.text === "down" }))
  .step(
    { slug: "page", dependsOn: ["classify"], if: { classify: { urgent: true } } },
    () => ({ paged: true }),
  )
  .step({ slug: "deliver", dependsOn: ["classify"] }, (deps) => deps.classify.label.length);

const routed = routeFlow(triage, {
  queues: { classify: "thread_processing", page: "paging", deliver: "slack_delivery" },
});
const stepQueued = withStepQueues(triage);

declare const client: PgflowClient;
expectTypeOf(createClient({ connectionString: "postgres://x" })).toEqualTypeOf<PgflowClient>();

type Out = { deliver: number; page?: { paged: boolean } };
expectTypeOf<FlowOutputOf<typeof triage>>().toEqualTypeOf<Out>();
expectTypeOf<FlowOutputOf<typeof routed>>().toEqualTypeOf<Out>();

async function typed(): Promise<void> {
  // Plain, routed and step-queued flows: the same input and output types.
  const plain = await client.startFlow(triage, { threadId: "t1", text: "down" });
  expectTypeOf(plain).toEqualTypeOf<FlowRun<typeof triage>>();
  expectTypeOf(await plain.waitFor("completed")).toEqualTypeOf<Out>();
  const viaRoute = await client.startFlow(routed, { threadId: "t1", text: "down" });
  expectTypeOf(await viaRoute.waitFor("completed", { timeoutMs: 30_000 })).toEqualTypeOf<Out>();
  const viaSteps = await client.startFlow(stepQueued, { threadId: "t1", text: "x" }, {
    runId: crypto.randomUUID(),
  });
  expectTypeOf(await viaSteps.waitFor("completed")).toEqualTypeOf<Out>();

  // A slug with the flow's type; a bare slug is Json in and out.
  const bySlug = await client.startFlow<typeof routed>("thread_triage_v1", {
    threadId: "t1",
    text: "x",
  });
  expectTypeOf(await bySlug.waitFor("completed")).toEqualTypeOf<Out>();
  const untyped = await client.startFlow("anything", { any: ["json", 1, null] });
  expectTypeOf(await untyped.waitFor("completed")).toEqualTypeOf<Json>();

  // waitFor("failed") and ("terminal") resolve to the run state.
  expectTypeOf(await plain.waitFor("failed")).toEqualTypeOf<RunState<typeof triage>>();
  const state = await plain.waitFor("terminal");
  expectTypeOf(state.input).toEqualTypeOf<{ threadId: string; text: string }>();
  expectTypeOf(state.output).toEqualTypeOf<Out | null>();
  for (const step of state.steps) {
    expectTypeOf(step.stepSlug).toEqualTypeOf<"classify" | "page" | "deliver">();
    if (step.stepSlug === "deliver") expectTypeOf(step.output).toEqualTypeOf<number | null>();
  }

  // Events: narrowing on type and step slug types the output.
  for await (const event of plain.events()) {
    expectTypeOf(event).toEqualTypeOf<RunEvent<typeof triage>>();
    if (event.type === "step:completed" && event.stepSlug === "classify") {
      expectTypeOf(event.output).toEqualTypeOf<{ label: string; urgent: boolean }>();
    }
    if (event.type === "run:completed") expectTypeOf(event.output).toEqualTypeOf<Out>();
    if (event.type === "run:failed") {
      expectTypeOf(event.stepSlug).toEqualTypeOf<"classify" | "page" | "deliver" | null>();
    }
  }
  // Many runs at once: one handle per input, typed as startFlow's.
  const many = await client.startFlows(routed, [{ threadId: "t1", text: "a" }, {
    threadId: "t2",
    text: "b",
  }], { priority: 5 });
  expectTypeOf(many).toEqualTypeOf<FlowRun<typeof routed>[]>();
  expectTypeOf(await many[0].waitFor("completed")).toEqualTypeOf<Out>();
  const manyBySlug = await client.startFlows<typeof triage>("thread_triage_v1", [
    { threadId: "t1", text: "x" },
  ]);
  expectTypeOf(await manyBySlug[0].waitFor("completed")).toEqualTypeOf<Out>();
  const read = await client.getRun<typeof triage>(plain.runId);
  expectTypeOf(read).toEqualTypeOf<RunState<typeof triage> | null>();
}
void typed;

// ---- negative checks -------------------------------------------------------------------------

async function wrong(): Promise<void> {
  // @ts-expect-error threadId must be a string
  await client.startFlow(triage, { threadId: 1, text: "x" });
  // @ts-expect-error text is missing
  await client.startFlow(routed, { threadId: "t1" });
  // @ts-expect-error an unknown key
  await client.startFlow(stepQueued, { threadId: "t1", text: "x", extra: true });
  // @ts-expect-error the slug's type parameter fixes the input
  await client.startFlow<typeof triage>("thread_triage_v1", { nope: true });
  // @ts-expect-error a bare slug still needs JSON
  await client.startFlow("anything", { at: new Date() });
  const run = await client.startFlow(triage, { threadId: "t1", text: "x" });
  const out = await run.waitFor("completed");
  // @ts-expect-error classify is not a leaf step: it is not in the output
  out.classify;
  // @ts-expect-error page may be skipped, so it may be missing
  out.page.paged;
  // @ts-expect-error not a status waitFor knows
  await run.waitFor("started");
  // @ts-expect-error runId is a string
  await client.startFlow(triage, { threadId: "t1", text: "x" }, { runId: 1 });
  // @ts-expect-error every input of startFlows is the flow's input
  await client.startFlows(triage, [{ threadId: "t1", text: "x" }, { threadId: 2, text: "y" }]);
  // @ts-expect-error startFlows takes no runId (each run gets a new one)
  await client.startFlows(triage, [], { runId: crypto.randomUUID() });
  // @ts-expect-error a client needs sql, connectionString or supabase
  createClient({ url: "postgres://x" });
}
void wrong;
