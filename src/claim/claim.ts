import type { Json } from "../util/json.ts";
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

/** A row of `pgflow.start_tasks` / `pgflow.read_and_claim` as the claim decoder reads it. */
export interface ClaimRow {
  /** The message id as text (cast `::text` in the query, so it stays exact). */
  readonly msg_id: string;
  readonly disposition: Disposition;
  readonly flow_slug: string | null;
  readonly run_id: string | null;
  readonly step_slug: string | null;
  readonly task_index: number | null;
  readonly input: Json;
  readonly attempt: number | null;
}

/**
 * The one decoder of claim rows: only `claimed` rows carry identity and input; every other row is
 * a message id with its disposition.
 */
export function decodeClaimRows(rows: readonly ClaimRow[]): ClaimResult {
  const claimed: ClaimedTask[] = [];
  const skipped: { messageId: string; disposition: Disposition }[] = [];
  for (const row of rows) {
    const messageId = toMessageId(row.msg_id);
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
