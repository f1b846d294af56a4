// Type tests for input schemas (Standard Schema v1), run by `deno check` (see
// type_harness_test.ts): the flow's input type is the schema's output type, for a hand-written
// schema and for zod; handlers, ctx.flowInput and the client's startFlow use it; an explicit input
// type must agree with the schema; anything else is refused as `input`.
import { expectTypeOf } from "expect-type";
import { z } from "npm:zod@3.24.2";
import {
  type ExtractFlowInput,
  Flow,
  type FlowInputOf,
  type PgflowClient,
  routeFlow,
  type StandardSchemaV1,
} from "../../mod.ts";

type Thread = { threadId: string; tags: string[] };

declare const handWritten: StandardSchemaV1<unknown, Thread>;

const fromSchema = new Flow({ slug: "thread_check_v1", input: handWritten })
  .step({ slug: "load" }, async (input, ctx) => {
    expectTypeOf(input).toEqualTypeOf<Thread>();
    expectTypeOf(ctx.flowInput).toEqualTypeOf<Promise<Thread>>();
    return await Promise.resolve(input.tags.length);
  })
  .step({ slug: "report", dependsOn: ["load"] }, async (deps, ctx) => {
    const run = await ctx.flowInput;
    expectTypeOf(run).toEqualTypeOf<Thread>();
    return `${run.threadId}: ${deps.load}`;
  });
expectTypeOf<ExtractFlowInput<typeof fromSchema>>().toEqualTypeOf<Thread>();

// A literal schema object: the output type comes from what validate answers.
const literal = new Flow({
  slug: "literal_v1",
  input: {
    "~standard": {
      version: 1,
      vendor: "hand-written",
      validate: (value: unknown) => ({ value: value as { n: number } }),
    },
  },
}).step({ slug: "double" }, (input) => {
  expectTypeOf(input).toEqualTypeOf<{ n: number }>();
  return input.n * 2;
});
expectTypeOf<ExtractFlowInput<typeof literal>>().toEqualTypeOf<{ n: number }>();

// zod: the output type, after defaults and transforms (the client sends the schema's value).
const ZodInput = z.object({
  email: z.string().email().transform((s) => s.toLowerCase()),
  retries: z.number().int().default(3),
});
const fromZod = new Flow({ slug: "signup_v1", input: ZodInput })
  .step({ slug: "send" }, (input) => {
    expectTypeOf(input).toEqualTypeOf<{ email: string; retries: number }>();
    return input.email;
  });
expectTypeOf<ExtractFlowInput<typeof fromZod>>().toEqualTypeOf<{
  email: string;
  retries: number;
}>();

// The client and routing keep the schema's type.
declare const client: PgflowClient;
const routed = routeFlow(fromSchema, { queues: { load: "threads", report: "threads" } });
expectTypeOf<FlowInputOf<typeof fromSchema>>().toEqualTypeOf<Thread>();
expectTypeOf<FlowInputOf<typeof routed>>().toEqualTypeOf<Thread>();
async function start(): Promise<void> {
  await client.startFlow(fromSchema, { threadId: "t1", tags: [] });
  await client.startFlow(routed, { threadId: "t1", tags: ["a"] });
  // @ts-expect-error the schema's output type requires tags
  await client.startFlow(fromSchema, { threadId: "t1" });
}
void start;

// An explicit input type must be the schema's output type (or a supertype of it).
new Flow<Thread>({ slug: "explicit_v1", input: handWritten });
// @ts-expect-error the schema produces Thread, not { id: number }
new Flow<{ id: number }>({ slug: "explicit_v2", input: handWritten });

// Without a schema nothing changes: the default input type is Json.
const plain = new Flow({ slug: "plain_v1" });
expectTypeOf<ExtractFlowInput<typeof plain>>().toEqualTypeOf<ExtractFlowInput<Flow>>();

// Not a Standard Schema: refused.
// @ts-expect-error a plain validator function is not a Standard Schema
new Flow({ slug: "bad_v1", input: (value: unknown) => value });
new Flow({
  slug: "bad_v2",
  // @ts-expect-error version must be 1
  input: { "~standard": { version: 2, vendor: "x", validate: () => ({ value: 1 }) } },
});
