import { jsonText } from "../util/json_write.ts";

/**
 * The exact JSON text of a handler's output: `0`, `false`, `""` and `null` stay what they are;
 * `undefined` (a handler that returns nothing) becomes JSON `null`; an `ExactNumber` is written
 * digit for digit. Nothing is stored as something else: a value JSON cannot hold (a function, a
 * bigint, a cycle, NaN or ±Infinity, which `JSON.stringify` would write as `null`) or `jsonb`
 * cannot store (U+0000 or a lone surrogate in a string or key) throws, which fails the task. The
 * error names the step (`where`, e.g. `flow.step`) and the place in the output
 * (`output.items[2]`), and says that outputs must be JSON; it never quotes the output.
 */
export function outputJson(output: unknown, where = "handler"): string {
  if (output === undefined) return "null";
  let text: string | undefined;
  try {
    text = jsonText(output, "output");
  } catch (error) {
    throw new TypeError(
      `step ${where} returned a value JSON cannot hold: ${(error as Error).message}; ` +
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
 * The stack trace of a thrown `Error` for the attempt's history (SQL keeps 4,000 characters of
 * it), with U+0000 replaced as in {@link errorMessage}; `undefined` for anything else. Never
 * logged: a stack's first line repeats the message.
 */
export function errorStack(error: unknown): string | undefined {
  if (!(error instanceof Error) || typeof error.stack !== "string") return undefined;
  return error.stack.slice(0, 4_000).replaceAll("\0", "\uFFFD");
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
