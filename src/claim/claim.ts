import type postgres from "postgres";
import type { Json } from "../dsl/json.ts";
import { toMessageId } from "./message_id.ts";

/**
 * A (flow_slug, step_slug) pair a worker has a handler for: one entry of its support set.
 *
 * @example
 * ```ts
 * import type { SupportedPair } from "@pgflow/shared";
 *
 * const pair: SupportedPair = ["thread_triage_v1", "classify"];
 * ```
 */
export type SupportedPair = readonly [flow: string, step: string];

/** What the claim did with one message id (see DESIGN §4). */
export type Disposition = "claimed" | "started" | "ineligible" | "unknown" | "unsupported";

/** A task this worker now owns: only claimed rows carry identity and input. */
export interface ClaimedTask {
  /** The message id, as an exact decimal string. */
  readonly messageId: string;
  /** The concrete flow slug. */
  readonly flowSlug: string;
  /** The run id. */
  readonly runId: string;
  /** The step slug. */
  readonly stepSlug: string;
  /** The task index. */
  readonly taskIndex: number;
  /** The handler input SQL built. */
  readonly input: Json;
  /** The attempt number this claim started (1-based). */
  readonly attempt: number;
}

/** The result of one claim: the tasks to run and the message ids that were not claimed. */
export interface ClaimResult {
  /** Tasks to run. */
  readonly claimed: readonly ClaimedTask[];
  /** Message ids not claimed, with the reason. */
  readonly skipped: readonly { readonly messageId: string; readonly disposition: Disposition }[];
}

interface ClaimRow {
  message_id: string;
  disposition: Disposition;
  flow_slug: string | null;
  run_id: string | null;
  step_slug: string | null;
  task_index: number | null;
  input: Json;
  attempt: number | null;
}

/**
 * One `pgflow.start_tasks` call: claims the tasks behind `messageIds` on `queue`, restricted to
 * exactly the `supported` pairs, or, with `null`, to the pairs the worker registered for `queue`
 * (what a running worker uses: its set is then not sent, nor parsed, with every batch). Ids travel
 * as decimal strings cast to `bigint[]` so they stay exact.
 */
export async function claimTasks(
  sql: postgres.Sql,
  queue: string,
  messageIds: readonly string[],
  workerId: string,
  supported: readonly SupportedPair[] | null,
): Promise<ClaimResult> {
  const ids = messageIds.map(toMessageId);
  const pairs = supported === null ? null : JSON.stringify(supported);
  const rows = await sql<ClaimRow[]>`
    select message_id::text as message_id, disposition, flow_slug, run_id, step_slug, task_index,
           input, attempt
    from pgflow.start_tasks(${queue}, ${ids}::bigint[], ${workerId}::uuid, ${pairs}::text::jsonb)`;
  const claimed: ClaimedTask[] = [];
  const skipped: { messageId: string; disposition: Disposition }[] = [];
  for (const row of rows) {
    const messageId = toMessageId(row.message_id);
    if (row.disposition === "claimed") {
      claimed.push({
        messageId,
        flowSlug: row.flow_slug!,
        runId: row.run_id!,
        stepSlug: row.step_slug!,
        taskIndex: row.task_index!,
        input: row.input,
        attempt: row.attempt!,
      });
    } else {
      skipped.push({ messageId, disposition: row.disposition });
    }
  }
  return { claimed, skipped };
}
