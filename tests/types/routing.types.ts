// Type tests for routing and worker queue selection, run by `deno check` (see
// type_harness_test.ts). Positive checks use expect-type; negative ones `@ts-expect-error`.
import { expectTypeOf } from "expect-type";
import {
  type Env,
  type ExtractFlowContext,
  type ExtractFlowEnv,
  type ExtractFlowInput,
  type ExtractHandlerContext,
  Flow,
  type QueueNameOf,
  type RoutedFlow,
  routeFlow,
  type StepInput,
  type StepOutput,
  type StepQueuedFlow,
  type StepSlug,
  type StepSlugOf,
  type UnwrapFlow,
  withStepQueues,
  type WorkerSelection,
  type WorkerStart,
} from "../../mod.ts";

type Redis = { get(key: string): Promise<string | null> };
type MyEnv = Env & { SLACK_WEBHOOK_URL: string };

const v1 = new Flow<{ threadId: string }, { redis: Redis }, MyEnv>({ slug: "thread_triage_v1" })
  .step({ slug: "classify" }, (input) => ({ label: input.threadId }))
  .step({ slug: "enrich", dependsOn: ["classify"] }, (deps) => ({ text: deps.classify.label }))
  .step({ slug: "deliverSlack", dependsOn: ["enrich"] }, (deps, ctx) => ({
    sent: deps.enrich.text,
    hook: ctx.env.SLACK_WEBHOOK_URL,
  }));

const routedV1 = routeFlow(v1, {
  queues: {
    classify: "thread_processing",
    enrich: "thread_processing",
    deliverSlack: "slack_delivery",
  },
});

// The exact step-key union and queue literals are kept.
expectTypeOf(routedV1.queues).toEqualTypeOf<
  Readonly<{
    classify: "thread_processing";
    enrich: "thread_processing";
    deliverSlack: "slack_delivery";
  }>
>();
expectTypeOf<keyof typeof routedV1.queues>().toEqualTypeOf<
  "classify" | "enrich" | "deliverSlack"
>();
expectTypeOf<QueueNameOf<typeof routedV1>>().toEqualTypeOf<
  "thread_processing" | "slack_delivery"
>();
expectTypeOf(routedV1.mode).toEqualTypeOf<"routed">();

// A routed flow keeps every type of its flow: input, context, env, steps, outputs, deps.
// (Exact identity, without expect-type's deep walk over the class's members.)
type Same<A, B> = (<T>() => T extends A ? 1 : 2) extends (<T>() => T extends B ? 1 : 2) ? true
  : false;
expectTypeOf<Same<typeof routedV1.flow, typeof v1>>().toEqualTypeOf<true>();
expectTypeOf<Same<UnwrapFlow<typeof routedV1>, typeof v1>>().toEqualTypeOf<true>();
expectTypeOf<Same<UnwrapFlow<typeof routedV1>, typeof v2>>().toEqualTypeOf<false>();
expectTypeOf<ExtractFlowInput<typeof routedV1>>().toEqualTypeOf<{ threadId: string }>();
expectTypeOf<ExtractFlowContext<typeof routedV1>>().toEqualTypeOf<{ redis: Redis }>();
expectTypeOf<ExtractFlowEnv<typeof routedV1>>().toEqualTypeOf<MyEnv>();
expectTypeOf<ExtractHandlerContext<typeof routedV1>["redis"]>().toEqualTypeOf<Redis>();
expectTypeOf<ExtractHandlerContext<typeof routedV1>["env"]>().toEqualTypeOf<MyEnv>();
expectTypeOf<StepSlug<typeof routedV1>>().toEqualTypeOf<"classify" | "enrich" | "deliverSlack">();
expectTypeOf<StepInput<typeof routedV1, "enrich">>().toEqualTypeOf<
  { classify: { label: string } }
>();
expectTypeOf<StepOutput<typeof routedV1, "deliverSlack">>().toEqualTypeOf<
  { sent: string; hook: string }
>();

// A second version and another flow share "thread_processing".
const v2 = new Flow<{ threadId: string; locale: string }>({ slug: "thread_triage_v2" })
  .step({ slug: "classify" }, (input) => `${input.locale}:${input.threadId}`)
  .step({ slug: "notify", dependsOn: ["classify"] }, (deps) => ({ text: deps.classify }));
const routedV2 = routeFlow(v2, { queues: { classify: "thread_processing", notify: "v2_notify" } });
const digest = new Flow<{ day: string }>({ slug: "daily_digest" })
  .step({ slug: "collect" }, (input) => [input.day]);
const routedDigest = routeFlow(digest, { queues: { collect: "digest_queue" } });

expectTypeOf<QueueNameOf<[typeof routedV1, typeof routedV2]>>().toEqualTypeOf<
  "thread_processing" | "slack_delivery" | "v2_notify"
>();
expectTypeOf<QueueNameOf<readonly (typeof routedV2 | typeof routedDigest)[]>>().toEqualTypeOf<
  "thread_processing" | "v2_notify" | "digest_queue"
>();
expectTypeOf(routedV1).toMatchTypeOf<RoutedFlow>();

// Private step queues.
const stepQueued = withStepQueues(v1);
expectTypeOf(stepQueued).toEqualTypeOf<StepQueuedFlow<typeof v1>>();
expectTypeOf<StepSlugOf<typeof stepQueued>>().toEqualTypeOf<
  "classify" | "enrich" | "deliverSlack"
>();
expectTypeOf<keyof typeof stepQueued.queues>().toEqualTypeOf<
  "classify" | "enrich" | "deliverSlack"
>();
expectTypeOf<ExtractFlowContext<typeof stepQueued>>().toEqualTypeOf<{ redis: Redis }>();

// Worker selection, as the worker's start function will declare it.
declare const start: WorkerStart<{ maxConcurrent?: number }, Promise<void>>;

start(routedV1, { queueName: "thread_processing" });
start(routedV1, { queueName: "slack_delivery", maxConcurrent: 2 });
start([routedV1, routedV2], { queueName: "v2_notify" });
start([routedV1, routedV2, routedDigest], { queueName: "digest_queue", maxConcurrent: 4 });
start(v1);
start(v1, { maxConcurrent: 1 });
start(stepQueued, { stepSlug: "enrich" });
expectTypeOf<WorkerSelection<typeof routedV1>["queueName"]>().toEqualTypeOf<
  "thread_processing" | "slack_delivery"
>();
expectTypeOf<WorkerSelection<typeof stepQueued>["stepSlug"]>().toEqualTypeOf<
  "classify" | "enrich" | "deliverSlack"
>();

// ---- negative checks -------------------------------------------------------------------------

// A missing route key.
// @ts-expect-error deliverSlack is not routed
routeFlow(v1, { queues: { classify: "thread_processing", enrich: "thread_processing" } });

// An unknown route key.
routeFlow(v1, {
  queues: {
    classify: "thread_processing",
    enrich: "thread_processing",
    deliverSlack: "slack_delivery",
    // @ts-expect-error "summarize" is not a step of v1
    summarize: "thread_processing",
  },
});

// A route value must be a string.
// @ts-expect-error a queue name is a string
routeFlow(v2, { queues: { classify: "thread_processing", notify: 1 } });

// routeFlow needs a route map.
// @ts-expect-error queues is required
routeFlow(v2, {});

// A queueName that is not among the routes.
// @ts-expect-error "other_queue" is not a queue of routedV1
start(routedV1, { queueName: "other_queue" });
// @ts-expect-error "digest_queue" is not a queue of routedV1 or routedV2
start([routedV1, routedV2], { queueName: "digest_queue" });

// A routed target must say which queue it polls.
// @ts-expect-error queueName is required
start(routedV1);
// @ts-expect-error queueName is required
start(routedV1, { maxConcurrent: 2 });

// A routed target does not take stepSlug.
// @ts-expect-error stepSlug is for withStepQueues targets
start(routedV1, { queueName: "thread_processing", stepSlug: "enrich" });

// stepSlug on a plain flow.
// @ts-expect-error a plain flow polls its own queue; it takes no stepSlug
start(v1, { stepSlug: "enrich" });

// queueName on a plain flow.
// @ts-expect-error a plain flow polls its own queue; it takes no queueName
start(v1, { queueName: "thread_processing" });

// A step-queued target needs one of its own steps.
// @ts-expect-error "summarize" is not a step of v1
start(stepQueued, { stepSlug: "summarize" });
// @ts-expect-error stepSlug is required
start(stepQueued);
// @ts-expect-error a step-queued target takes stepSlug, not queueName
start(stepQueued, { queueName: "thread_triage_v1__enrich" });

// An array may hold only routed flows.
// @ts-expect-error plain flows cannot be combined on one worker
start([v1, v2], { queueName: "thread_triage_v1" });

// Context and env keep their types through routing.
// @ts-expect-error redis.get takes a string
((ctx: ExtractHandlerContext<typeof routedV1>) => ctx.redis.get(1));
