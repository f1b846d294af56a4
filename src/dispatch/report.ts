import type { Sql } from "../platform/types.ts";
import type { ClaimedTask } from "../claim/claim.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";

/**
 * The exact JSON text of a handler's output: `0`, `false`, `""` and `null` stay what they are;
 * `undefined` (a handler that returns nothing) becomes JSON `null`. Throws for values JSON cannot
 * hold (a function, a bigint, a cycle), which fails the task instead of storing something else;
 * the error names the step (`where`, e.g. `flow.step`) and says that outputs must be JSON, since
 * `JSON.stringify`'s own words ("Do not know how to serialize a BigInt") name neither.
 */
export function outputJson(output: unknown, where = "handler"): string {
  if (output === undefined) return "null";
  let text: string | undefined;
  try {
    text = JSON.stringify(output);
  } catch (error) {
    const hint = /bigint/i.test(String((error as Error).message))
      ? " (a bigint: return it as a string, String(n), or as a number if it fits)"
      : "";
    throw new TypeError(
      `step ${where} returned a value JSON cannot hold: ${(error as Error).message}${hint}; ` +
        `a step's output must be JSON (objects, arrays, strings, numbers, booleans, null)`,
    );
  }
  if (text === undefined) {
    throw new TypeError(
      `step ${where} returned ${typeof output}, which is not JSON; a step's output must be JSON`,
    );
  }
  return text;
}

/**
 * The longest error text `fail_task` stores (in `step_tasks.error_message`, and for an exhausted
 * task in `step_states` too): 2,000 characters. Enough for a message and a few lines of stack; a
 * longer one (an error quoting a whole response, a thrown object holding a body) is cut there and
 * says how long it was.
 */
export const MAX_ERROR_CHARS = 2_000;

/**
 * The text `fail_task` records for a thrown value: an `Error`'s message (else its name), a
 * string as it is, anything else as JSON, never more than {@link MAX_ERROR_CHARS} characters.
 * A thrown object is serialised only up to that bound, never whole. U+0000, which Postgres text
 * cannot hold (the report would fail on every retry), becomes U+FFFD.
 */
export function errorMessage(error: unknown): string {
  let text: string;
  if (error instanceof Error) text = error.message || error.name;
  else if (typeof error === "string") text = error;
  else {
    const json = boundedJson(error, MAX_ERROR_CHARS + 1);
    // Serialisation stopped at the bound: how long the whole would be is not known (nor wanted).
    if (json !== undefined && json.length > MAX_ERROR_CHARS) {
      return cap(json.replaceAll("\0", "\uFFFD"), MAX_ERROR_CHARS, " … [cut]");
    }
    text = json ?? String(error);
  }
  return cap(text.replaceAll("\0", "\uFFFD"), MAX_ERROR_CHARS);
}

/**
 * The longest part of a handler's error message a log line carries: 300 characters of its first
 * line. Enough to say what went wrong; the whole text (up to {@link MAX_ERROR_CHARS}) is stored by
 * `fail_task`, in `step_tasks.error_message`.
 */
export const MAX_LOGGED_ERROR_CHARS = 300;

/**
 * What a log line says about a thrown value: its kind (the error's name, `string`, or the value's
 * type), its code when it has a short one (a SQLSTATE, `ECONNRESET`), its length, and for an
 * `Error` or a thrown string the first line of its message (at most
 * {@link MAX_LOGGED_ERROR_CHARS} characters). A thrown object or other value is never serialised
 * into a log line: it is typically a response or a record, i.e. data, not a message.
 */
export function errorFields(error: unknown): {
  readonly errorKind: string;
  readonly errorCode?: string;
  readonly errorLength: number;
  readonly error?: string;
} {
  const code = (error as { code?: unknown } | null)?.code;
  const kind = error instanceof Error
    ? error.name
    : error === null
    ? "null"
    : typeof error === "object"
    ? `object ${(error as object).constructor?.name ?? ""}`.trim()
    : typeof error;
  return {
    errorKind: /^[\w .$-]{1,60}$/.test(kind) ? kind : "unnamed",
    ...(typeof code === "string" && /^[A-Za-z0-9_]{1,32}$/.test(code) ? { errorCode: code } : {}),
    errorLength: errorMessage(error).length,
    ...(error instanceof Error || typeof error === "string"
      ? { error: cap(firstLine(errorMessage(error)), MAX_LOGGED_ERROR_CHARS, " … [cut]") }
      : {}),
  };
}

function firstLine(text: string): string {
  return text.split("\n")[0];
}

/**
 * The text of a database error for a log line: its message's first line, at most 200 characters.
 * For errors of the worker's own calls (Postgres and postgres.js messages), never a handler's.
 */
export function databaseErrorText(error: unknown): string {
  const text = error instanceof Error ? error.message || error.name : String(error);
  return cap(firstLine(text).replaceAll("\0", "\uFFFD"), 200);
}

/**
 * Whether a failed `complete_task` (or `complete_tasks`) says the output itself cannot be stored,
 * so no retry can succeed: a Postgres data exception (SQLSTATE class 22, e.g. 22P05 for a string
 * with U+0000, which jsonb refuses) or a program limit (54000, e.g. a jsonb past its size limit).
 * A connection error, a timeout or a lock conflict is not: those are retried.
 */
export function isUnstorableOutput(error: unknown): boolean {
  const e = error as { name?: unknown; code?: unknown; severity?: unknown } | null;
  return e?.name === "PostgresError" && typeof e.code === "string" &&
    (/^22[0-9A-Z]{3}$/.test(e.code) || e.code === "54000");
}

/**
 * The error `fail_task` records when the output cannot be stored: the SQLSTATE, Postgres's
 * message and detail (never its context line, which quotes the output).
 */
export function unstorableOutputMessage(error: unknown): string {
  const e = error as { code?: string; message?: string; detail?: string };
  const detail = e.detail ? `: ${e.detail}` : "";
  return errorMessage(
    `output could not be stored (SQLSTATE ${e.code}): ${e.message}${detail}; ` +
      "return JSON that Postgres jsonb accepts (no U+0000 in strings, under 255 MB)",
  );
}

function cap(
  text: string,
  max: number,
  suffix = ` … [cut, ${text.length} characters in all]`,
): string {
  if (text.length <= max) return text;
  let end = max - suffix.length;
  // Never split a surrogate pair.
  if (/[\uD800-\uDBFF]/.test(text[end - 1])) end--;
  return text.slice(0, end) + suffix;
}

/**
 * JSON of `value`, stopped once it is `max` characters long (the rest is never visited), as
 * JSON.stringify writes it otherwise (toJSON, undefined and functions left out); cycles show as
 * `"[cycle]"`. `undefined` when JSON has no text for it.
 */
function boundedJson(value: unknown, max: number): string | undefined {
  let out = "";
  const seen = new Set<object>();
  const write = (v: unknown): boolean => {
    if (out.length >= max) return false;
    if (
      v !== null && typeof v === "object" &&
      typeof (v as { toJSON?: unknown }).toJSON === "function"
    ) {
      try {
        v = (v as { toJSON: () => unknown }).toJSON();
      } catch {
        v = String(v);
      }
    }
    if (v === null || typeof v !== "object") {
      let text: string | undefined;
      try {
        text = typeof v === "string"
          ? JSON.stringify(v.slice(0, max - out.length))
          : JSON.stringify(v);
      } catch {
        text = JSON.stringify(String(v));
      }
      if (text === undefined) return false;
      out += text;
      return true;
    }
    if (seen.has(v)) {
      out += '"[cycle]"';
      return true;
    }
    seen.add(v);
    if (Array.isArray(v)) {
      out += "[";
      v.forEach((item, i) => {
        if (out.length >= max) return;
        if (i > 0) out += ",";
        if (!write(item)) out += "null";
      });
      out += "]";
    } else {
      out += "{";
      let first = true;
      for (const key of Object.keys(v)) {
        if (out.length >= max) break;
        const item = (v as Record<string, unknown>)[key];
        if (item === undefined || typeof item === "function" || typeof item === "symbol") continue;
        const mark = out.length;
        out += `${first ? "" : ","}${JSON.stringify(key)}:`;
        if (write(item)) first = false;
        else out = out.slice(0, mark);
      }
      out += "}";
    }
    seen.delete(v);
    return true;
  };
  return write(value) ? out : undefined;
}

/**
 * `pgflow.complete_task` with the exact output text. Late or duplicate calls are ignored by SQL.
 * The text is cast `::text::jsonb` on purpose: a parameter typed jsonb would be JSON-encoded again
 * by postgres.js, and a JS `null` would become SQL NULL instead of JSON `null`.
 */
export async function completeTask(
  sql: Sql,
  task: ClaimedTask,
  output: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  // The attempt makes a late retry of this report harmless once the task was claimed again.
  await bounded(
    sql`select pgflow.complete_task(${task.runId}::uuid, ${task.stepSlug}, ${task.taskIndex}::integer,
                                    ${output}::text::jsonb, ${task.attempt}::integer)`,
    "complete_task",
    timeoutMs,
  );
}

/**
 * What `fail_task` did with a failed attempt: `retried` (the task is queued again), `failed` (that
 * was its last attempt, or no retry could be delivered), or `ignored` (a late report: the attempt
 * was already settled, e.g. by stalled recovery, or the run is over).
 */
export type FailOutcome = "retried" | "failed" | "ignored";

/** `pgflow.fail_task`: SQL decides between a retry and exhaustion, and says which it was. */
export async function failTask(
  sql: Sql,
  task: ClaimedTask,
  message: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<FailOutcome> {
  const rows = await bounded(
    sql<{ status: string }[]>`
      select status from pgflow.fail_task(${task.runId}::uuid, ${task.stepSlug},
                                          ${task.taskIndex}::integer, ${message},
                                          ${task.attempt}::integer)`,
    "fail_task",
    timeoutMs,
  );
  if (rows.length === 0) return "ignored";
  return rows[0].status === "queued" ? "retried" : "failed";
}
