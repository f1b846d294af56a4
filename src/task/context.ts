import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { StepContext } from "../platform/supabase.ts";
import type { Env, PgmqMessageRecord, StepTaskRecord } from "../dsl/context.ts";
import type { Json } from "../dsl/json.ts";
import type { ClaimedTask } from "./claim.ts";
import type { FlowInputCache } from "./flow_input.ts";
import type { RunInputChecks } from "./input_check.ts";

/** What every handler context of one worker shares. */
export interface ContextResources {
  /** The environment handlers see. */
  readonly env: Env;
  /** Aborted when the worker shuts down. */
  readonly shutdownSignal: AbortSignal;
  /** The worker's pool. */
  readonly sql: Sql;
  /** Creates (once) or returns the Supabase client; throws when it cannot be created. */
  readonly supabase: () => SupabaseClient;
  /** Run inputs by run id. */
  readonly flowInputs: FlowInputCache;
  /** Whether run inputs pass their flow's schema, checked once per run. */
  readonly inputChecks: RunInputChecks;
  /** Extra context the worker config provides (the flow's `TContext`). */
  readonly extra?: { readonly [key: string]: unknown };
}

/**
 * The context of one claimed task. `supabase` and `flowInput` are getters, so a handler that
 * never reads them costs no client and no query.
 */
export function buildContext(
  resources: ContextResources,
  queue: string,
  task: ClaimedTask,
  message: PgmqMessageRecord,
  signal: AbortSignal = resources.shutdownSignal,
): StepContext<Json> & { readonly [key: string]: unknown } {
  const stepTask: StepTaskRecord = Object.freeze({
    flow_slug: task.flowSlug,
    run_id: task.runId,
    step_slug: task.stepSlug,
    task_index: task.taskIndex,
    queue_name: queue,
    msg_id: task.messageId,
    input: task.input,
  });
  // One literal rather than a property definition per field: a context is built per task. The
  // engine's fields come last, so the worker's extra context cannot shadow them.
  const context = {
    ...resources.extra,
    env: resources.env,
    shutdownSignal: resources.shutdownSignal,
    signal,
    sql: resources.sql,
    get supabase(): SupabaseClient {
      return resources.supabase();
    },
    get flowInput(): Promise<Json> {
      return resources.flowInputs.get(task.runId);
    },
    stepTask,
    attempt: task.attempt,
    rawMessage: message,
  };
  return context as StepContext<Json> & { readonly [key: string]: unknown };
}
