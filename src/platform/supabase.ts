/**
 * The DSL preset for this platform (Supabase, or any Postgres a worker reaches with postgres.js):
 * every handler context also has the worker's pool (`ctx.sql`) and a Supabase client
 * (`ctx.supabase`). This `Flow` is the one `@pgflow/shared` exports; the DSL's own, without
 * platform types, is `@pgflow/shared/dsl`'s.
 *
 * @module
 */
import type { DepsTable } from "../dsl/builder_types.ts";
import type { Env, StepContext as DslStepContext } from "../dsl/context.ts";
import { Flow as DslFlow } from "../dsl/flow.ts";
import type { Json } from "../dsl/json.ts";
import type { AnySteps } from "../dsl/types.ts";
import type { Sql, SupabaseClient } from "./types.ts";

/**
 * What every handler receives as its second argument, before the flow's custom context is
 * merged in: the DSL's context plus this platform's resources.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * new Flow<{ id: string }>({ slug: "audit" }).step({ slug: "log" }, async (_input, ctx) => {
 *   const run = await ctx.flowInput;
 *   await ctx.sql`select 1`;
 *   return { id: run.id, queue: ctx.stepTask.queue_name, messageId: ctx.rawMessage.msg_id };
 * });
 * ```
 */
export interface StepContext<TInput, TEnv extends Env = Env> extends DslStepContext<TInput, TEnv> {
  /** The worker's postgres.js pool. */
  readonly sql: Sql;
  /** A service-role Supabase client. */
  readonly supabase: SupabaseClient;
}

/**
 * The full handler context of a flow: the built-in {@link StepContext} plus the flow's custom
 * context type.
 *
 * @example
 * ```ts
 * import type { HandlerContext } from "@pgflow/shared";
 *
 * type Ctx = HandlerContext<{ id: string }, { redis: { get(key: string): string } }>;
 * const lookup = (ctx: Ctx) => ctx.redis.get(ctx.stepTask.run_id);
 * ```
 */
export type HandlerContext<TInput, TContext, TEnv extends Env = Env> =
  & StepContext<TInput, TEnv>
  & TContext;

/**
 * A workflow definition whose handlers get this platform's context: the DSL's `Flow` (every
 * method, option and type rule of it) with `ctx.sql` and `ctx.supabase` in every handler context.
 * Each `.step()`, `.array()` and `.map()` returns a `Flow` of this class.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 *
 * const triage = new Flow<{ threadId: string }>({ slug: "thread_triage_v1", maxAttempts: 3 })
 *   .step({ slug: "classify" }, (input) => ({ label: `thread ${input.threadId}`, urgent: true }))
 *   .step({ slug: "store", dependsOn: ["classify"] }, async (deps, ctx) => {
 *     await ctx.sql`select ${deps.classify.label}::text`;
 *     return deps.classify.urgent;
 *   });
 * ```
 */
export class Flow<
  TInput = Json,
  TContext = Record<never, never>,
  TEnv extends Env = Env,
  TSteps extends AnySteps = Record<never, never>,
  TDeps extends DepsTable = Record<never, never>,
> extends DslFlow<
  TInput,
  TContext,
  TEnv,
  TSteps,
  TDeps,
  Pick<StepContext<TInput, TEnv>, "sql" | "supabase">
> {}
