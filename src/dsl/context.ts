import type postgres from "postgres";
import type { SupabaseClient } from "@supabase/supabase-js";
import type { Json } from "./json.ts";

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
 * A PGMQ message as the worker read it. Message ids are `bigint` in SQL and travel as exact
 * decimal strings in JavaScript, because ids past 2^53 would lose digits as numbers.
 *
 * @example
 * ```ts
 * import type { PgmqMessageRecord } from "@pgflow/shared";
 *
 * const message: PgmqMessageRecord = {
 *   msg_id: "9007199254740993",
 *   read_ct: 1,
 *   enqueued_at: "2025-01-01T00:00:00Z",
 *   vt: "2025-01-01T00:00:30Z",
 *   message: { run_id: "4f1c..." },
 *   headers: null,
 * };
 * ```
 */
export interface PgmqMessageRecord {
  /** The message id as an exact decimal string. */
  readonly msg_id: string;
  /** How many times the message has been read. */
  readonly read_ct: number;
  /** When the message was sent (ISO timestamp). */
  readonly enqueued_at: string;
  /** When the message becomes visible again (ISO timestamp). */
  readonly vt: string;
  /** The message body. It never authorises work: claims use ids only. */
  readonly message: Json;
  /** PGMQ headers, when present. */
  readonly headers?: Json | null;
}

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
  /** The worker's postgres.js pool. */
  readonly sql: postgres.Sql;
  /** A service-role Supabase client. */
  readonly supabase: SupabaseClient;
  /** The run's input, loaded lazily (and cached per run) for non-root steps. */
  readonly flowInput: Promise<TInput>;
  /** The claimed task. */
  readonly stepTask: StepTaskRecord;
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
