/**
 * Taking an input's values out of what a schema says about it. Schema libraries quote the value
 * they reject, each in its own way: valibot `received 4111111111111111` or `received "ada"`, zod
 * `received 'gold'`, arktype `(was true)`, a custom message however its author wrote it. The engine
 * promises errors, logs and run records never hold the input's values, so every value the input
 * contains is found in a message and replaced, whatever its type and however it is printed:
 * quoted (JSON, `"…"`, `'…'`, `` `…` ``) or bare, trimmed, in another case, a number in its
 * exponent or grouped form (`4.111111111111111e+15`, `4,111,111,111,111,111`).
 *
 * Two scopes, so that a message stays readable: the value at the path (and everything
 * inside it) is replaced in every form, as it is what the message is about; values elsewhere in
 * the input are replaced when they are distinctive enough to be data rather than words of the
 * message (strings and numbers of at least {@link MIN_BARE_CHARS} characters). Keys are not
 * values: they are the path, and are shown.
 *
 * @module
 */

/** What a value becomes in a message. */
export const REDACTED = "[redacted]";

/**
 * Strings shorter than this are replaced only when quoted, and values outside the path
 * only from this length: a bare "a", or a `5` elsewhere in the input, would garble the schema's
 * own words (`Expected >=5`) and hide nothing.
 */
export const MIN_BARE_CHARS = 3;

/** The longest message kept whole; a longer one is cut once redacted (a schema's is short). */
export const MAX_MESSAGE_CHARS = 1_000;

/** How one printed form of a value may be matched. */
interface Form {
  /** A number: never matched inside a longer number (`5` in `3.5` or `15`). */
  readonly numeric: boolean;
  /** Only between matching quotes (a short string). */
  readonly quotedOnly: boolean;
}

/** Printed forms by their lower-cased text, and the lengths found among them. */
interface Forms {
  readonly byText: Map<string, Form>;
  readonly lengths: Set<number>;
}

const QUOTES = `'"\``;
const WORD = /[\p{L}\p{N}_]/u;

/**
 * The values of one input, found and replaced in the messages a schema wrote about it.
 *
 * @example
 * ```ts
 * import { InputRedactor } from "./input_redaction.ts";
 *
 * const redactor = new InputRedactor({ card: 4111111111111111, name: "Ada Lovelace" });
 * redactor.redact("Invalid type: Expected string but received 4111111111111111", ["card"]);
 * // "Invalid type: Expected string but received [redacted]"
 * ```
 */
export class InputRedactor {
  readonly #input: unknown;
  readonly #elsewhere: Forms;
  #root: Forms | undefined;

  /** @param input the value the schema checked */
  constructor(input: unknown) {
    this.#input = input;
    this.#elsewhere = formsOf(input, false);
  }

  /**
   * `message` with the input's values replaced by {@link REDACTED} (every value at `path`, the
   * issue's, and the distinctive ones elsewhere), then cut at {@link MAX_MESSAGE_CHARS}.
   */
  redact(message: string, path: readonly PropertyKey[]): string {
    const near = path.length === 0
      ? (this.#root ??= formsOf(this.#input, true))
      : formsOf(valueAt(this.#input, path), true);
    // Redacted whole, then cut: a cut first could leave the start of a value unrecognised.
    const text = replaceForms(message, [near, this.#elsewhere]);
    return text.length > MAX_MESSAGE_CHARS ? `${text.slice(0, MAX_MESSAGE_CHARS)} … [cut]` : text;
  }
}

/** The value at `path` in `input`; `undefined` where the path leads nowhere. */
function valueAt(input: unknown, path: readonly PropertyKey[]): unknown {
  let value = input;
  for (const key of path) {
    if (value === null || typeof value !== "object") return undefined;
    value = (value as Record<PropertyKey, unknown>)[key];
  }
  return value;
}

// The ways a form may be matched (shared: an input may have a million values).
const STRING: Form = { numeric: false, quotedOnly: false };
const SHORT_STRING: Form = { numeric: false, quotedOnly: true };
const NUMBER: Form = { numeric: true, quotedOnly: false };

/**
 * Every printed form of every value in `root` (walked without recursion: an input may be deeply
 * nested; each object once, so a cycle in a client's input ends). `near`: the issue's own value,
 * every form of it; else only the distinctive ones.
 */
function formsOf(root: unknown, near: boolean): Forms {
  const forms: Forms = { byText: new Map(), lengths: new Set() };
  const add = (text: string, form: Form) => {
    const key = form.numeric ? text : text.toLowerCase();
    const known = forms.byText.get(key);
    // A form known both ways keeps the looser match.
    if (known === undefined || (known.quotedOnly && !form.quotedOnly)) {
      forms.byText.set(key, form);
      forms.lengths.add(key.length);
    }
  };
  const seen = new Set<object>();
  const pending: unknown[] = [root];
  while (pending.length > 0) {
    let value = pending.pop();
    if (value !== null && typeof value === "object") {
      const toJSON = (value as { toJSON?: unknown }).toJSON;
      if (typeof toJSON === "function") {
        try {
          value = toJSON.call(value);
        } catch {
          continue;
        }
      }
    }
    if (typeof value === "string") addString(value, near, add);
    else if (typeof value === "number" || typeof value === "bigint") addNumber(value, near, add);
    else if ((typeof value === "boolean" || value === null) && near) add(String(value), STRING);
    else if (value !== null && typeof value === "object" && !seen.has(value)) {
      seen.add(value);
      for (const item of Object.values(value)) pending.push(item);
    }
  }
  return forms;
}

// What JSON escapes in a string: quotes, backslashes, control characters, lone surrogates.
// deno-lint-ignore no-control-regex
const ESCAPED = /["\\\u0000-\u001f\ud800-\udfff]/;

function addString(value: string, near: boolean, add: (text: string, form: Form) => void): void {
  const string = (text: string) => {
    if (text.length >= MIN_BARE_CHARS) add(text, STRING);
    else if (near && text !== "") add(text, SHORT_STRING);
  };
  string(value);
  // A schema that trims before it checks prints the value trimmed.
  const trimmed = value.trim();
  if (trimmed !== value) string(trimmed);
  // JSON writes `a"b` as "a\"b": its escaped form is a form too.
  if (ESCAPED.test(value)) string(JSON.stringify(value).slice(1, -1));
}

function addNumber(
  value: number | bigint,
  near: boolean,
  add: (text: string, form: Form) => void,
): void {
  const plain = String(value);
  if (!near && plain.length - (plain[0] === "-" ? 1 : 0) < MIN_BARE_CHARS) return;
  add(plain, NUMBER);
  if (typeof value === "bigint") add(`${plain}n`, NUMBER);
  if (/^-?\d{4}/.test(plain)) add(grouped(plain), NUMBER);
  if (plain.includes("e+")) add(plain.replace("e+", "e"), NUMBER); // `1e+21` is also `1e21`
  // Exponent forms (`4.111111111111111e+15`) are a way to print the value at the path; elsewhere
  // the plain and grouped forms suffice.
  if (near && typeof value === "number" && Number.isFinite(value)) {
    const exponent = value.toExponential();
    add(exponent, NUMBER);
    add(exponent.replace("e+", "e"), NUMBER);
  }
}

/**
 * `plain` (a number as `String` writes it) with its whole part grouped by thousands, as
 * `toLocaleString("en-US")` prints it (which is slow for a million values).
 */
function grouped(plain: string): string {
  const [whole, fraction] = plain.split(".");
  const withCommas = whole.replace(/\B(?=(\d{3})+(?!\d))/g, ",");
  return fraction === undefined ? withCommas : `${withCommas}.${fraction}`;
}

/** `message` with each longest form of `sets` found at word boundaries replaced, left to right. */
function replaceForms(message: string, sets: readonly Forms[]): string {
  const lengths = [...new Set(sets.flatMap((s) => [...s.lengths]))].sort((a, b) => b - a);
  if (lengths.length === 0) return message;
  const word = Array.from({ length: message.length }, (_, i) => WORD.test(message[i]));
  // A match starts and ends where a word does not go on across it.
  const edge = (i: number) => i <= 0 || i >= message.length || !word[i] || !word[i - 1];
  let out = "";
  let copied = 0;
  for (let i = 0; i < message.length; i++) {
    if (!edge(i)) continue;
    for (const length of lengths) {
      const j = i + length;
      if (j > message.length || !edge(j)) continue;
      const form = lookup(sets, message.slice(i, j).toLowerCase());
      if (form === undefined) continue;
      if (form.numeric && !numberEdges(message, i, j)) continue;
      const quote = message[i - 1];
      const quoted = i > copied && QUOTES.includes(quote ?? "") && message[j] === quote;
      if (form.quotedOnly && !quoted) continue;
      const [from, to] = quoted ? [i - 1, j + 1] : [i, j];
      out += message.slice(copied, from) + REDACTED;
      copied = to;
      i = to - 1;
      break;
    }
  }
  return out + message.slice(copied);
}

function lookup(sets: readonly Forms[], text: string): Form | undefined {
  for (const set of sets) {
    const form = set.byText.get(text);
    if (form !== undefined) return form;
  }
  return undefined;
}

/** A number is not part of a longer one: no digit or decimal point right before or after it. */
function numberEdges(message: string, i: number, j: number): boolean {
  const before = message[i - 1] ?? "";
  const after = message[j] ?? "";
  if (/[0-9.]/.test(before) || /[0-9]/.test(after)) return false;
  return !(after === "." && /[0-9]/.test(message[j + 1] ?? ""));
}
