/**
 * The handler context as the DSL defines it, on any platform: what every handler receives, the
 * task it runs, the environment. A platform adds its resources through the `TPlatform` type
 * parameter of `Flow` (`src/platform/supabase.ts` adds `sql` and `supabase`); the DSL itself
 * imports nothing of a runtime or platform.
 *
 * @module
 */
import type { Json } from "./json.ts";
import type { PgmqMessageRecord } from "./message.ts";

export type { PgmqMessageRecord } from "./message.ts";

/**
 * The environment a worker exposes to handlers. Declare a narrower type as the third type
 * parameter of `Flow` to get typed keys.
 *
 * @example
 * ```ts
 * import { Flow, type Env } from "@pgflow/shared";
 *
 * type MyEnv = Env & { SLACK_WEBHOOK_URL: string };
 * const flow = new Flow<{ id: string }, Record<never, never>, MyEnv>({ slug: "notify" })
 *   .step({ slug: "send" }, (_input, ctx) => ctx.env.SLACK_WEBHOOK_URL);
 * ```
 */
export type Env = { readonly [key: string]: string | undefined };

/**
 * The task a handler is running, as returned by the claim. Its message identity is the pair
 * `(queue_name, msg_id)`.
 *
 * @example
 * ```ts
 * import type { StepTaskRecord } from "@pgflow/shared";
 *
 * function describe(task: StepTaskRecord): string {
 *   return `${task.flow_slug}.${task.step_slug}#${task.task_index} on ${task.queue_name}/${task.msg_id}`;
 * }
 * ```
 */
export interface StepTaskRecord {
  /** The concrete flow slug. */
  readonly flow_slug: string;
  /** The run id (uuid). */
  readonly run_id: string;
  /** The step slug. */
  readonly step_slug: string;
  /** The task index (0 for single steps, the element index for map steps). */
  readonly task_index: number;
  /** The queue the task's message lives on (its snapshot). */
  readonly queue_name: string;
  /** The message id as an exact decimal string. */
  readonly msg_id: string;
  /** The handler input computed by SQL. */
  readonly input: Json;
}

/**
 * What every handler receives as its second argument on any platform, before the platform's
 * resources and the flow's custom context are merged in. On Supabase (the `Flow` of
 * `@pgflow/shared`) the context also has `sql` and `supabase`.
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared/dsl";
 *
 * new Flow<{ id: string }>({ slug: "audit" }).step({ slug: "log" }, async (_input, ctx) => {
 *   const run = await ctx.flowInput;
 *   return { id: run.id, queue: ctx.stepTask.queue_name, messageId: ctx.rawMessage.msg_id };
 * });
 * ```
 */
export interface StepContext<TInput, TEnv extends Env = Env> {
  /** The worker's environment. */
  readonly env: TEnv;
  /** Aborted when the worker shuts down; long handlers should honour it. */
  readonly shutdownSignal: AbortSignal;
  /**
   * Aborted when this task's run is cancelled (`pgflow.cancel_run`; noticed within about a second)
   * or when the worker shuts down: pass it to `fetch` and check it in long loops, so a cancelled
   * run stops early. Its report after that is ignored.
   */
  readonly signal: AbortSignal;
  /** The run's input, loaded lazily (and cached per run) for non-root steps. */
  readonly flowInput: Promise<TInput>;
  /** The claimed task. */
  readonly stepTask: StepTaskRecord;
  /**
   * This attempt's number: 1 on the first run of the task, 2 on its first retry, and so on up to
   * the step's `maxAttempts` (a task taken back by stalled recovery counts that attempt too).
   * Unlike `rawMessage.read_ct`, reads by workers that did not claim the message do not count.
   */
  readonly attempt: number;
  /** The PGMQ message that carried the task. */
  readonly rawMessage: PgmqMessageRecord;
}

/**
 * The full handler context of a flow: the built-in {@link StepContext}, the platform's resources
 * (`TPlatform`: none here; `sql` and `supabase` in the `HandlerContext` of `@pgflow/shared`) and
 * the flow's custom context type.
 *
 * @example
 * ```ts
 * import type { HandlerContext } from "@pgflow/shared/dsl";
 *
 * type Ctx = HandlerContext<{ id: string }, { redis: { get(key: string): string } }>;
 * const lookup = (ctx: Ctx) => ctx.redis.get(ctx.stepTask.run_id);
 * ```
 */
export type HandlerContext<
  TInput,
  TContext,
  TEnv extends Env = Env,
  TPlatform = Record<never, never>,
> =
  & StepContext<TInput, TEnv>
  & TPlatform
  & TContext;
