// Type tests for the DSL, run by `deno check` (see type_harness_test.ts). Positive checks use
// expect-type; each negative check is a `@ts-expect-error` that must stay in use (TS2578).
import { expectTypeOf } from "expect-type";
import {
  type Env,
  type ExtractFlowContext,
  type ExtractFlowDeps,
  type ExtractFlowEnv,
  type ExtractFlowInput,
  type ExtractFlowSteps,
  type ExtractHandlerContext,
  Flow,
  type PgmqMessageRecord,
  type StepInput,
  type StepOutput,
  type StepSlug,
  type StepTaskRecord,
} from "../../mod.ts";
import type postgres from "postgres";
import type { SupabaseClient } from "@supabase/supabase-js";

type Input = { threadId: string; tags: string[] };
type Redis = { get(key: string): Promise<string | null> };
type MyEnv = Env & { SLACK_WEBHOOK_URL: string };

const flow = new Flow<Input, { redis: Redis }, MyEnv>({ slug: "thread_triage_v1" })
  .step({ slug: "classify" }, (input, ctx) => {
    // A root handler gets the flow input and the full context.
    expectTypeOf(input).toEqualTypeOf<Input>();
    expectTypeOf(ctx.env).toEqualTypeOf<MyEnv>();
    expectTypeOf(ctx.env.SLACK_WEBHOOK_URL).toEqualTypeOf<string>();
    expectTypeOf(ctx.shutdownSignal).toEqualTypeOf<AbortSignal>();
    expectTypeOf(ctx.sql).toEqualTypeOf<postgres.Sql>();
    expectTypeOf(ctx.supabase).toEqualTypeOf<SupabaseClient>();
    expectTypeOf(ctx.flowInput).toEqualTypeOf<Promise<Input>>();
    expectTypeOf(ctx.stepTask).toEqualTypeOf<StepTaskRecord>();
    expectTypeOf(ctx.rawMessage).toEqualTypeOf<PgmqMessageRecord>();
    expectTypeOf(ctx.redis).toEqualTypeOf<Redis>();
    return { label: input.threadId, urgent: input.tags.includes("urgent") };
  })
  .step(
    { slug: "enrich", dependsOn: ["classify"], if: { classify: { urgent: true } } },
    async (deps) => {
      expectTypeOf(deps).toEqualTypeOf<{ classify: { label: string; urgent: boolean } }>();
      return await Promise.resolve({ summary: deps.classify.label });
    },
  )
  .step(
    {
      slug: "audit",
      dependsOn: ["classify"],
      ifNot: { classify: { urgent: false } },
      whenUnmet: "skip-cascade",
    },
    () => ({ audited: true }),
  )
  .step({ slug: "flaky", whenExhausted: "skip" }, () => 1)
  .step({ slug: "strict", if: { threadId: "x" }, whenUnmet: "fail" }, () => "s")
  .step(
    { slug: "deliverSlack", dependsOn: ["enrich", "audit", "flaky", "strict", "classify"] },
    (deps) => {
      // 'skip' makes keys optional; 'skip-cascade' and 'fail' keep them required.
      expectTypeOf(deps).toEqualTypeOf<{
        classify: { label: string; urgent: boolean };
        audit: { audited: boolean };
        strict: string;
        enrich?: { summary: string };
        flaky?: number;
      }>();
      return { sent: deps.enrich?.summary ?? null };
    },
  );

// Message ids are exact decimal strings.
expectTypeOf<PgmqMessageRecord["msg_id"]>().toEqualTypeOf<string>();
expectTypeOf<StepTaskRecord["msg_id"]>().toEqualTypeOf<string>();

// Helpers read the flow's types back.
expectTypeOf<StepSlug<typeof flow>>().toEqualTypeOf<
  "classify" | "enrich" | "audit" | "flaky" | "strict" | "deliverSlack"
>();
expectTypeOf(flow.stepOrder).toEqualTypeOf<readonly StepSlug<typeof flow>[]>();
expectTypeOf<ExtractFlowInput<typeof flow>>().toEqualTypeOf<Input>();
expectTypeOf<ExtractFlowContext<typeof flow>>().toEqualTypeOf<{ redis: Redis }>();
expectTypeOf<ExtractFlowEnv<typeof flow>>().toEqualTypeOf<MyEnv>();
expectTypeOf<ExtractHandlerContext<typeof flow>["redis"]>().toEqualTypeOf<Redis>();
expectTypeOf<StepOutput<typeof flow, "enrich">>().toEqualTypeOf<{ summary: string }>();
expectTypeOf<ExtractFlowSteps<typeof flow>["flaky"]>().toEqualTypeOf<number>();
expectTypeOf<ExtractFlowDeps<typeof flow>["enrich"]>().toEqualTypeOf<"classify">();
expectTypeOf<ExtractFlowDeps<typeof flow>["classify"]>().toEqualTypeOf<never>();
expectTypeOf<StepInput<typeof flow, "classify">>().toEqualTypeOf<Input>();
expectTypeOf<StepInput<typeof flow, "enrich">>().toEqualTypeOf<
  { classify: { label: string; urgent: boolean } }
>();

// Arrays and maps.
const mapped = new Flow<{ text: string }>({ slug: "words" })
  .array({ slug: "split" }, (input) => input.text.split(" "))
  .map({ slug: "lengths", array: "split" }, (word) => {
    expectTypeOf(word).toEqualTypeOf<string>();
    return word.length;
  })
  .step({ slug: "total", dependsOn: ["lengths"] }, (deps) => {
    expectTypeOf(deps.lengths).toEqualTypeOf<number[]>();
    return deps.lengths.reduce((a, b) => a + b, 0);
  });
expectTypeOf<StepOutput<typeof mapped, "split">>().toEqualTypeOf<string[]>();

const rootMap = new Flow<{ id: number }[]>({ slug: "root_map" }).map({ slug: "ids" }, (item) => {
  expectTypeOf(item).toEqualTypeOf<{ id: number }>();
  return item.id;
});
expectTypeOf<StepOutput<typeof rootMap, "ids">>().toEqualTypeOf<number[]>();

// JSON outputs that are accepted: nested objects, optional keys, nullable values, any.
flow.step(
  { slug: "ok1" },
  () => ({ a: [1, "x", null], b: { c: true }, d: undefined as string | undefined }),
);
flow.step({ slug: "ok2" }, () => null);
flow.step({ slug: "ok3" }, () => Promise.resolve(["a", "b"] as const));
flow.step({ slug: "ok4" }, () => JSON.parse("{}"));

// ---- negative checks -------------------------------------------------------------------------

// Duplicate step slug.
// @ts-expect-error "classify" already exists
flow.step({ slug: "classify" }, () => 1);

// Unknown dependency.
// @ts-expect-error "nope" is not a step
flow.step({ slug: "x", dependsOn: ["nope"] }, () => 1);

// A dependency must be defined before (no forward or self references).
// @ts-expect-error "x" is not defined yet
flow.step({ slug: "x", dependsOn: ["x"] }, () => 1);

// Non-JSON outputs.
// @ts-expect-error a Date is not JSON
flow.step({ slug: "x" }, () => new Date());
// @ts-expect-error a function is not JSON
flow.step({ slug: "x" }, () => ({ callback: () => 1 }));
// @ts-expect-error a symbol is not JSON
flow.step({ slug: "x" }, () => Symbol("s"));
// @ts-expect-error a bigint is not JSON
flow.step({ slug: "x" }, () => ({ big: 1n }));
// @ts-expect-error a Map is not JSON
flow.step({ slug: "x" }, () => Promise.resolve(new Map<string, number>()));
// @ts-expect-error a handler that returns nothing has no JSON output
flow.step({ slug: "x" }, () => {});
// @ts-expect-error an async handler that resolves to nothing has no JSON output
flow.step({ slug: "x" }, async () => {});
// @ts-expect-error undefined alone is not JSON
flow.step({ slug: "x" }, () => undefined);
// @ts-expect-error a map item result must be JSON too
mapped.map({ slug: "x", array: "split" }, () => new Date());

// .array() must return an array.
// @ts-expect-error a string is not an array
mapped.array({ slug: "x" }, (input) => input.text);

// whenUnmet only with a condition.
// @ts-expect-error whenUnmet without if/ifNot
flow.step({ slug: "x", whenUnmet: "skip" }, () => 1);

// Conditions are typed by the input they match.
// @ts-expect-error threadId is a string
flow.step({ slug: "x", if: { threadId: 1 } }, () => 1);

// A root map needs an array input.
// @ts-expect-error the flow input is not an array, so array: is required
flow.map({ slug: "x" }, (item) => item);

// A dependent map may only name a step whose output is an array.
// @ts-expect-error "enrich" does not return an array
flow.map({ slug: "x", array: "enrich" }, (item) => item);

// Map steps take their one dependency through array:, not dependsOn.
// @ts-expect-error dependsOn is not a map option
mapped.map({ slug: "x", dependsOn: ["split"] }, (item) => item);

// Option values are typed.
// @ts-expect-error whenExhausted has three values
flow.step({ slug: "x", whenExhausted: "retry" }, () => 1);
// @ts-expect-error unknown option
flow.step({ slug: "x", maxAttempt: 3 }, () => 1);

// Handlers see only what they are given.
// @ts-expect-error a root handler has no dependency object
flow.step({ slug: "x" }, (input) => input.classify);
// @ts-expect-error an optional dependency must be checked before use
flow.step({ slug: "x", dependsOn: ["enrich"] }, (deps) => deps.enrich.summary);
