import type { Sql } from "../platform/types.ts";
import type { PgmqMessageRecord } from "../dsl/message.ts";
import type { ClaimedTask, Disposition, SkippedMessage, SupportedPair } from "./claim.ts";
import { toMessageId } from "./message_id.ts";
import { bounded } from "../platform/deadline.ts";
import { parseJsonb } from "../util/json_parse.ts";
import type { CompletionArrays } from "./report.ts";
import { tracingEnabled } from "../telemetry/attempts.ts";

/** How one read reserves messages. */
export interface ReadOptions {
  /** Seconds the read hides the messages (the reservation until the claim re-arms it). */
  readonly visibilityTimeout: number;
  /** Most tasks to claim (the free slots), and how many messages to read unless `readQty` is more. */
  readonly qty: number;
  /**
   * Messages to read when more than `qty`: as the last read's `nextReadQty` said, to reach this
   * worker's own work queued behind another worker's backlog. At most `qty` of them are claimed.
   */
  readonly readQty?: number;
  /** Seconds the read may wait in the database for messages to appear. */
  readonly maxPollSeconds: number;
  /** How often, while waiting, the database looks again. */
  readonly pollIntervalMs: number;
  /** Milliseconds after which the call is abandoned (beyond the wait itself, a margin). */
  readonly timeoutMs: number;
  /** A claimed task's input larger than this (bytes of JSON text) stays in the database. */
  readonly maxInputBytes?: number;
}

/** One read and its claim: how many messages were read, the tasks claimed, and the ids not claimed. */
export interface ReadAndClaimResult {
  /** How many messages the read returned (claimed or not). */
  readonly read: number;
  /**
   * The message record of every claimed task, by exact id (the handler context's `rawMessage`).
   * Messages not claimed are not here: their bodies never leave the database.
   */
  readonly messages: ReadonlyMap<string, PgmqMessageRecord>;
  /** Tasks to run. */
  readonly claimed: readonly ClaimedTask[];
  /** Messages not claimed, with the reason and the owning task's identity. */
  readonly skipped: readonly SkippedMessage[];
  /**
   * How many messages the next read should ask for to reach this worker's own work queued behind
   * what this read returned (another worker's backlog at the head of the queue), or 0.
   */
  readonly nextReadQty: number;
}

/** A row of `pgflow.read_and_claim` / `pgflow.complete_and_claim`. */
interface Row {
  /** The message id as text (cast `::text` in the query, so it stays exact). */
  readonly msg_id: string;
  readonly disposition: Disposition;
  readonly flow_slug: string | null;
  readonly run_id: string | null;
  readonly step_slug: string | null;
  readonly task_index: number | null;
  /** The task's input as jsonb's text (`::text`), parsed by `parseJsonb`: see {@link decodeRead}. */
  readonly input: string | null;
  /** The input's size in bytes of JSON text; the input itself is NULL when over the limit. */
  readonly input_bytes: number | null;
  readonly attempt: number | null;
  readonly next_read_qty: number | null;
  /** The run's trace context: selected only while spans are recorded (see readColumns). */
  readonly traceparent?: string | null;
  read_ct: number;
  enqueued_at: Date | string;
  vt: Date | string;
  /** NULL unless claimed: the body of a message not claimed is never sent. As text, like input. */
  message: string | null;
  headers: string | null;
}

/**
 * The columns of a read's rows (see {@link Row}): ids, bodies and inputs as text, read exactly; an
 * input over `maxInputBytes` stays in the database (its size only). `t.input` is the input's text,
 * joined once per row by the read.
 */
function readColumns(sql: Sql, maxInputBytes: number | undefined) {
  // Asked once per process: without an exporter the read stays exactly as it was.
  traced ??= tracingEnabled();
  return sql`msg_id::text as msg_id, read_ct, enqueued_at, vt, message::text as message,
    headers::text as headers, disposition, flow_slug, run_id, step_slug, task_index,
    case when octet_length(t.input) <= ${maxInputBytes ?? MAX_TEXT}::integer
      then t.input end as input, octet_length(t.input) as input_bytes, attempt, next_read_qty
    ${
    traced
      ? sql`, (select r.traceparent from pgflow.runs r
               where r.run_id = c.run_id and c.disposition = 'claimed') as traceparent`
      : sql``
  }`;
}

/** Whether reads bring each claimed run's `traceparent` (spans are recorded). */
let traced: boolean | undefined;

/**
 * One `pgflow.read_and_claim` on `queue`: a single `pgmq.read_with_poll` (the only read of these
 * messages this worker makes; it blocks in the database until messages arrive or
 * `maxPollSeconds` pass) and `start_tasks` on exactly the ids it returned, in one round trip and
 * one transaction. `supported` is the exact support set, or `null` to claim against the set the
 * worker registered. Should the claim fail, the read is rolled back with it. Only claimed rows bring a
 * message body and headers: a message not claimed (another sender's, of any size) comes back as
 * its id and disposition alone.
 *
 * The transaction commits without waiting for its WAL to reach the disk (`synchronous_commit`
 * off, for it alone): a claim is a lease (the message's visibility, the task started, its attempt
 * counted), not durable work. Postgres still commits it atomically and in order, so a server
 * crash can only forget the last claims whole, as if they had not been made, and the next
 * synchronous commit (this worker's completion of the task) makes them durable first. A forgotten
 * claim is a lost reply seen from the other side (docs/reliability.md): the task is claimed again
 * and its handler may run again. The wait for the disk is the largest part of an unloaded
 * pickup's claim. `complete_and_claim` carries outputs and keeps it. Set inside the statement:
 * transaction-scoped, so it holds behind a transaction pooler, and no round trip is added.
 */
export async function readAndClaim(
  sql: Sql,
  queue: string,
  workerId: string,
  supported: readonly SupportedPair[] | null,
  options: ReadOptions,
): Promise<ReadAndClaimResult> {
  const pairs = supported === null ? null : JSON.stringify(supported);
  const rows = await bounded(
    sql<Row[]>`
    select ${readColumns(sql, options.maxInputBytes)}
    from pgflow.read_and_claim(${queue}, ${workerId}::uuid, ${options.visibilityTimeout}::integer,
                               ${options.qty}::integer, ${options.maxPollSeconds}::integer,
                               ${options.pollIntervalMs}::integer, ${pairs}::text::jsonb,
                               ${options.readQty ?? null}::integer) c
    -- The input's text once per row (offset 0: not recomputed for each use above).
    cross join lateral (select c.input::text offset 0) as t(input)
    -- A lease: committed without waiting for the disk (see readAndClaim).
    cross join (select set_config('synchronous_commit', 'off', true)) as l(s)`,
    "read_and_claim",
    options.timeoutMs,
  );
  return decodeRead(rows);
}

/**
 * `completions` and then a read, in one `pgflow.complete_and_claim` call: one round trip and one
 * transaction where a busy worker would otherwise make two (`complete_tasks` and
 * `read_and_claim`). The read never waits in the database (`options.maxPollSeconds` is not used).
 * Resolves with the read; if it rejects, nothing of it happened (see `Completer.carry`).
 */
export async function completeAndClaim(
  sql: Sql,
  queue: string,
  workerId: string,
  supported: readonly SupportedPair[] | null,
  options: ReadOptions,
  completions: CompletionArrays,
): Promise<ReadAndClaimResult> {
  const pairs = supported === null ? null : JSON.stringify(supported);
  const rows = await bounded(
    sql<Row[]>`
    select ${readColumns(sql, options.maxInputBytes)}
    from pgflow.complete_and_claim(
      ${completions.runIds as string[]}::uuid[], ${completions.stepSlugs as string[]}::text[],
      ${completions.taskIndexes as number[]}::integer[],
      ${completions.outputs as string[]}::text[]::jsonb[],
      ${completions.attempts as number[]}::integer[],
      ${queue}, ${workerId}::uuid, ${options.visibilityTimeout}::integer, ${options.qty}::integer,
      ${pairs}::text::jsonb, ${options.readQty ?? null}::integer) c
    -- The input's text once per row (offset 0: not recomputed for each use above).
    cross join lateral (select c.input::text offset 0) as t(input)`,
    "complete_and_claim",
    options.timeoutMs,
  );
  return decodeRead(rows);
}

/**
 * The one decoder of read rows: `claimed` rows become tasks (identity, input, attempt) with their
 * message records; every other row is a message id with its disposition and, when a task owns it,
 * that task's identity. Inputs, bodies and headers come as jsonb's text and are read by
 * `parseJsonb`, not by the pool's JSON.parse: keys exactly as stored (V8's key-cache bug), and
 * numbers a JavaScript number cannot hold as `ExactNumber`s. This holds for any pool the worker
 * is given, whatever its type parsers.
 */
function decodeRead(rows: readonly Row[]): ReadAndClaimResult {
  const messages = new Map<string, PgmqMessageRecord>();
  const claimed: ClaimedTask[] = [];
  const skipped: SkippedMessage[] = [];
  for (const row of rows) {
    const messageId = toMessageId(row.msg_id);
    if (row.disposition !== "claimed") {
      skipped.push({
        messageId,
        disposition: row.disposition,
        flowSlug: row.flow_slug,
        runId: row.run_id,
        stepSlug: row.step_slug,
      });
      continue;
    }
    messages.set(messageId, {
      msg_id: messageId,
      read_ct: row.read_ct,
      enqueued_at: iso(row.enqueued_at),
      vt: iso(row.vt),
      message: row.message === null ? null : parseJsonb(row.message),
      headers: row.headers === null ? null : parseJsonb(row.headers),
    });
    claimed.push({
      messageId,
      flowSlug: row.flow_slug!,
      runId: row.run_id!,
      stepSlug: row.step_slug!,
      taskIndex: row.task_index!,
      input: row.input === null ? null : parseJsonb(row.input),
      attempt: row.attempt!,
      ...inputSize(row),
      ...(row.traceparent == null ? {} : { traceparent: row.traceparent }),
    });
  }
  return {
    read: rows.length,
    messages,
    claimed,
    skipped,
    nextReadQty: rows[0]?.next_read_qty ?? 0,
  };
}

/** No limit: larger than any text Postgres has. */
const MAX_TEXT = 2 ** 31 - 1;

/** A claimed row's input size, and whether its input was left in the database for its size. */
function inputSize(row: Row): Pick<ClaimedTask, "inputBytes" | "inputWithheld"> {
  if (row.input_bytes === null) return {};
  return row.input === null
    ? { inputBytes: row.input_bytes, inputWithheld: true }
    : { inputBytes: row.input_bytes };
}

function iso(value: Date | string): string {
  return value instanceof Date ? value.toISOString() : value;
}
