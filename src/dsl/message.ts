import type { Json } from "../util/json.ts";

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
