import type { PgmqMessageRecord } from "./message.ts";
import type { Env } from "../platform/env.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { Json } from "./json.ts";

export type { Env } from "../platform/env.ts";
export type { PgmqMessageRecord } from "./message.ts";

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
 * What every handler receives as its second argument, before the flow's custom context is
 * merged in.
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
  /** The worker's postgres.js pool. */
  readonly sql: Sql;
  /** A service-role Supabase client. */
  readonly supabase: SupabaseClient;
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
