// Type tests for `@pgflow/shared/dsl`, run by `deno check` (see type_harness_test.ts): the DSL's
// own Flow types flows exactly as the main entry's does, but its handler context has no platform
// resources; a flow built with it still runs on a worker.
import { expectTypeOf } from "expect-type";
import {
  type Env,
  type ExtractFlowContext,
  type ExtractHandlerContext,
  Flow,
  type PgmqMessageRecord,
  routeFlow,
  type StepTaskRecord,
} from "../../dsl.ts";
import { createWorker, Flow as SupabaseFlow } from "../../mod.ts";

type Redis = { get(key: string): Promise<string | null> };
type MyEnv = Env & { SLACK_WEBHOOK_URL: string };

const flow = new Flow<{ id: string }, { redis: Redis }, MyEnv>({ slug: "dsl_only_v1" })
  .step({ slug: "load" }, (input, ctx) => {
    expectTypeOf(input).toEqualTypeOf<{ id: string }>();
    expectTypeOf(ctx.env).toEqualTypeOf<MyEnv>();
    expectTypeOf(ctx.stepTask).toEqualTypeOf<StepTaskRecord>();
    expectTypeOf(ctx.rawMessage).toEqualTypeOf<PgmqMessageRecord>();
    expectTypeOf(ctx.redis).toEqualTypeOf<Redis>();
    // The DSL alone knows no platform: no pool, no Supabase client.
    // @ts-expect-error sql is the platform's (the Flow of @pgflow/shared)
    ctx.sql;
    // @ts-expect-error supabase is the platform's too
    ctx.supabase;
    return input.id.length;
  })
  .step({ slug: "report", dependsOn: ["load"] }, (deps) => deps.load + 1);

expectTypeOf<ExtractFlowContext<typeof flow>>().toEqualTypeOf<{ redis: Redis }>();
expectTypeOf<ExtractHandlerContext<typeof flow>["redis"]>().toEqualTypeOf<Redis>();

// The platform's Flow is the same builder, its steps typed alike, with sql and supabase added.
const preset = new SupabaseFlow<{ id: string }>({ slug: "preset_v1" })
  .step({ slug: "load" }, (input, ctx) => ctx.sql`select ${input.id}`.then(() => 1));
expectTypeOf<ExtractHandlerContext<typeof preset>["sql"]>().not.toBeNever();
// Either runs on a worker.
createWorker(flow);
createWorker([routeFlow(flow, { queues: { load: "work", report: "work" } })], {
  queueName: "work",
});
createWorker(preset);
