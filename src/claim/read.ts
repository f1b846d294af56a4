import type postgres from "postgres";
import type { Json } from "../dsl/json.ts";
import type { PgmqMessageRecord } from "../dsl/context.ts";
import { toMessageId } from "./message_id.ts";

/** How one read reserves messages. */
export interface ReadOptions {
  /** Seconds the read hides the messages (the reservation until the claim re-arms it). */
  readonly visibilityTimeout: number;
  /** Most messages to read (the free slots). */
  readonly qty: number;
  /** Seconds the read may wait in the database for messages to appear. */
  readonly maxPollSeconds: number;
  /** How often, while waiting, the database looks again. */
  readonly pollIntervalMs: number;
}

interface ReadRow {
  msg_id: string;
  read_ct: number;
  enqueued_at: Date | string;
  vt: Date | string;
  message: Json;
  headers?: Json | null;
}

/**
 * One `pgmq.read_with_poll` on `queue`: the only read of these messages this worker makes. It
 * blocks in the database until messages arrive or `maxPollSeconds` pass.
 */
export async function readMessages(
  sql: postgres.Sql,
  queue: string,
  options: ReadOptions,
): Promise<PgmqMessageRecord[]> {
  const rows = await sql<ReadRow[]>`
    select msg_id::text as msg_id, read_ct, enqueued_at, vt, message, headers
    from pgmq.read_with_poll(${queue}, ${options.visibilityTimeout}::integer, ${options.qty}::integer,
                             ${options.maxPollSeconds}::integer, ${options.pollIntervalMs}::integer)`;
  return rows.map((row) => ({
    msg_id: toMessageId(row.msg_id),
    read_ct: row.read_ct,
    enqueued_at: iso(row.enqueued_at),
    vt: iso(row.vt),
    message: row.message,
    headers: row.headers ?? null,
  }));
}

function iso(value: Date | string): string {
  return value instanceof Date ? value.toISOString() : value;
}
