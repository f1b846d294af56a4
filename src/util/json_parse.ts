/**
 * Parsing the JSON a run carries so that it arrives exactly as `jsonb` holds it.
 *
 * `JSON.parse` is not enough on its own, for two reasons:
 * - V8's key cache (Deno 2.0 to at least 2.9, nodejs/node#63785): once an object with an escaped
 *   key has been parsed, a later object of the same shape may get an earlier escaped key instead
 *   of its own (`{"": 1, "\t": 2}` read as `{"": 1, "\\": 2}`). Only keys with a backslash are
 *   affected.
 * - Numbers: `jsonb` keeps any decimal exactly; a JavaScript number rounds 12345678901234567890
 *   to 12345678901234567000, a 30-digit decimal to 17 digits, 1e400 to Infinity.
 *
 * {@link parseJson} therefore uses `JSON.parse` only for text where neither can happen (no
 * backslash inside a key, no number longer than 15 digits or with an exponent: the everyday
 * case, at native speed) and a parser of its own otherwise, which reads keys correctly and keeps
 * every number a double cannot hold as an {@link ExactNumber}.
 *
 * @module
 */
import type { Json } from "./json.ts";

/**
 * A JSON number that a JavaScript number cannot hold exactly (an integer beyond 2^53, a decimal
 * with more digits than a double keeps, one beyond its range), kept as its exact text. It is what
 * `JSON.rawJSON(text)` returns: a frozen object whose `rawJSON` is the number's text, which
 * `JSON.stringify` writes as that number, digit for digit. So a handler that returns or forwards
 * it (to an API, as its output) keeps it exact. Use `BigInt(value.rawJSON)` for integer
 * arithmetic; `Number(value.rawJSON)` rounds, as any JavaScript number would.
 *
 * @example
 * ```ts
 * import { type ExactNumber, isExactNumber, parseJson } from "@pgflow/shared";
 *
 * const order = parseJson('{"id": 12345678901234567890}') as { id: number | ExactNumber };
 * if (isExactNumber(order.id)) console.log(BigInt(order.id.rawJSON) + 1n); // 12345678901234567891n
 * JSON.stringify(order); // '{"id":12345678901234567890}'
 * ```
 */
export interface ExactNumber {
  /** The number's JSON text, as `jsonb` wrote it. */
  readonly rawJSON: string;
}

/** `JSON.rawJSON` and `JSON.isRawJSON` (V8 11.4 and later: every Deno 2), not in TypeScript's lib. */
const raw = JSON as unknown as {
  readonly rawJSON?: (text: string) => ExactNumber;
  readonly isRawJSON?: (value: unknown) => boolean;
};

/** The JSON number grammar. */
const NUMBER = /^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$/;

/**
 * Whether `value` is an {@link ExactNumber}: a number that arrived as its exact text because a
 * JavaScript number could not hold it.
 *
 * @example
 * ```ts
 * import { isExactNumber, parseJson } from "@pgflow/shared";
 *
 * isExactNumber(parseJson("12345678901234567890")); // true
 * isExactNumber(parseJson("42")); // false: 42 is a number
 * ```
 */
export function isExactNumber(value: unknown): value is ExactNumber {
  return raw.isRawJSON !== undefined && raw.isRawJSON(value) &&
    NUMBER.test((value as ExactNumber).rawJSON);
}

/**
 * An {@link ExactNumber} from a number's text or a bigint: what a handler returns to put a number
 * a JavaScript number cannot hold into its output, digit for digit. Throws a `TypeError` naming
 * the text when it is not a JSON number.
 *
 * @example
 * ```ts
 * import { exactNumber } from "@pgflow/shared";
 *
 * const total = 12345678901234567890n * 3n;
 * JSON.stringify({ total: exactNumber(total) }); // '{"total":37037036703703703670}'
 * ```
 */
export function exactNumber(value: string | bigint): ExactNumber {
  const text = typeof value === "bigint" ? value.toString() : value;
  if (typeof text !== "string" || !NUMBER.test(text)) {
    throw new TypeError(
      `exactNumber: ${JSON.stringify(String(text)).slice(0, 80)} is not a JSON number; ` +
        `pass digits such as "12345678901234567890" or "0.1000000000000000055", or a bigint`,
    );
  }
  return rawJson(text, () => "a number");
}

/**
 * Parses JSON text (as Postgres writes `json` and `jsonb`) so that every key is read as written
 * and every number is either a JavaScript number that holds it exactly or an
 * {@link ExactNumber}. Text with no backslash inside a key and no number of more than 15 digits
 * or with an exponent (the everyday case) goes to `JSON.parse` as it is. Throws a `SyntaxError`
 * (with the position, never the text) for text that is not JSON.
 *
 * @example
 * ```ts
 * import { parseJson } from "@pgflow/shared";
 *
 * parseJson('{"x": 1, "\\\\": 2}'); // { x: 1, "\\": 2 }
 * parseJson('{"x": 1, "\\t": 2}'); // { x: 1, "\t": 2 } (JSON.parse may say "\\" here)
 * JSON.stringify(parseJson("[12345678901234567890, 0.5]")); // "[12345678901234567890,0.5]"
 * ```
 */
export function parseJson(text: string): Json {
  if (!needsExactParse(text)) {
    try {
      return JSON.parse(text);
    } catch {
      // Not JSON. JSON.parse's message may quote the text; the parser's names a position only.
    }
  }
  return new ExactParser(text).parse();
}

/**
 * Numbers `JSON.parse` may round: more than 15 digits (a double holds any 15) or an exponent.
 * An exponent counts only where a number ends (before `,`, `]`, `}`, a space or the end), so the
 * digits-e-digits inside ids and hashes ("3e5c…") do not send text to the slow path. Digits in
 * strings may match too; that costs time, never correctness.
 */
const RISKY_NUMBER = /[\d.]{16}|\d[eE][+-]?\d+(?=[\s,\]}]|$)/;

/** Whether `text` has a key with a backslash or a number a double may not hold. */
export function needsExactParse(text: string): boolean {
  const backslash = text.indexOf("\\");
  return (backslash !== -1 && escapedKey(text, backslash)) || RISKY_NUMBER.test(text);
}

/**
 * Whether a string holding a backslash is followed by `:`, i.e. is a key. A backslash occurs only
 * inside strings, so from each one the scan goes to the end of its string (skipping escapes) and
 * looks at what follows; then on to the next backslash past that string. Every `indexOf` starts
 * past the previous one: linear in the text.
 */
function escapedKey(text: string, first: number): boolean {
  const end = text.length;
  let quote = -1;
  let slash = first;
  while (slash < end) {
    let after = slash + 2;
    for (;;) {
      if (quote < after) quote = text.indexOf('"', after);
      if (quote === -1) return true; // not JSON: let the parser say so
      if (slash < after) {
        slash = text.indexOf("\\", after);
        if (slash === -1) slash = end;
      }
      if (slash >= quote) break;
      after = slash + 2;
    }
    let next = quote + 1;
    while (isSpace(text.charCodeAt(next))) next++;
    if (text.charCodeAt(next) === COLON) return true;
  }
  return false;
}

const COLON = 0x3a;
const QUOTE = 0x22;
const COMMA = 0x2c;
const OPEN_BRACE = 0x7b;
const CLOSE_BRACE = 0x7d;
const OPEN_BRACKET = 0x5b;
const CLOSE_BRACKET = 0x5d;
const MINUS = 0x2d;

function isSpace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** Control characters, which JSON strings may hold only escaped. */
// deno-lint-ignore no-control-regex
const CONTROL = /[\u0000-\u001f]/;

const ESCAPES: Record<string, string> = {
  '"': '"',
  "\\": "\\",
  "/": "/",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
};

/** One container being filled: its key (objects) or `undefined` (arrays). */
interface Frame {
  readonly container: Record<string, unknown> | unknown[];
  key: string | undefined;
}

/**
 * A JSON parser that reads each key from its own text and keeps numbers a double cannot hold as
 * {@link ExactNumber}s. Iterative, so nesting as deep as Postgres allows cannot overflow the
 * stack; strings without escapes are single slices of the text.
 */
class ExactParser {
  readonly #text: string;
  #at = 0;
  /** Position of the next backslash at or after `#at` (the text's length when there is none). */
  #slash = -1;

  constructor(text: string) {
    this.#text = text;
  }

  parse(): Json {
    const text = this.#text;
    const stack: Frame[] = [];
    let value: unknown;
    for (;;) {
      // A value starts here: a scalar completes at once, a container opens a frame.
      this.#space();
      const c = text.charCodeAt(this.#at);
      if (c === OPEN_BRACE || c === OPEN_BRACKET) {
        this.#at++;
        this.#space();
        const array = c === OPEN_BRACKET;
        if (text.charCodeAt(this.#at) === (array ? CLOSE_BRACKET : CLOSE_BRACE)) {
          this.#at++;
          value = array ? [] : {};
        } else {
          stack.push({ container: array ? [] : {}, key: array ? undefined : this.#key() });
          continue;
        }
      } else {
        value = this.#scalar(c, stack);
      }
      // A value is complete: it goes into its container, and containers that end complete too.
      for (;;) {
        const top = stack.at(-1);
        if (top === undefined) {
          this.#space();
          if (this.#at !== text.length) this.#fail("unexpected text after the value");
          return value as Json;
        }
        if (top.key === undefined) (top.container as unknown[]).push(value);
        else setMember(top.container as Record<string, unknown>, top.key, value);
        this.#space();
        const next = text.charCodeAt(this.#at++);
        if (next === COMMA) {
          if (top.key !== undefined) {
            this.#space();
            top.key = this.#key();
          }
          break;
        }
        if (next !== (top.key === undefined ? CLOSE_BRACKET : CLOSE_BRACE)) {
          this.#at--;
          this.#fail(top.key === undefined ? "expected , or ]" : "expected , or }");
        }
        stack.pop();
        value = top.container;
      }
    }
  }

  #scalar(c: number, stack: readonly Frame[]): unknown {
    if (c === QUOTE) return this.#string();
    if (c === MINUS || (c >= 0x30 && c <= 0x39)) return this.#number(stack);
    for (const [word, value] of LITERALS) {
      if (this.#text.startsWith(word, this.#at)) {
        this.#at += word.length;
        return value;
      }
    }
    return this.#fail(this.#at >= this.#text.length ? "unexpected end" : "expected a value");
  }

  /** A key and its colon. */
  #key(): string {
    if (this.#text.charCodeAt(this.#at) !== QUOTE) this.#fail("expected a key");
    const key = this.#string();
    this.#space();
    if (this.#text.charCodeAt(this.#at++) !== COLON) {
      this.#at--;
      this.#fail("expected :");
    }
    return key;
  }

  #string(): string {
    const text = this.#text;
    const start = this.#at + 1;
    let quote = text.indexOf('"', start);
    if (quote === -1) this.#fail("unterminated string");
    if (this.#slash < start) this.#nextSlash(start);
    let out = "";
    let from = start;
    while (this.#slash < quote) {
      const slash = this.#slash;
      const part = text.slice(from, slash);
      if (CONTROL.test(part)) this.#failAt(from, "control character in a string");
      out += part;
      const escape = text[slash + 1];
      if (escape === "u") {
        const hex = text.slice(slash + 2, slash + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) this.#failAt(slash, "bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        from = slash + 6;
      } else {
        const char = ESCAPES[escape];
        if (char === undefined) this.#failAt(slash, "bad escape");
        out += char;
        from = slash + 2;
      }
      this.#nextSlash(from);
      if (quote < from) {
        quote = text.indexOf('"', from);
        if (quote === -1) this.#fail("unterminated string");
      }
    }
    const tail = text.slice(from, quote);
    if (CONTROL.test(tail)) this.#failAt(from, "control character in a string");
    this.#at = quote + 1;
    return out + tail;
  }

  #nextSlash(from: number): void {
    const found = this.#text.indexOf("\\", from);
    this.#slash = found === -1 ? this.#text.length : found;
  }

  #number(stack: readonly Frame[]): number | ExactNumber {
    const text = this.#text;
    const start = this.#at;
    let at = start;
    if (text.charCodeAt(at) === MINUS) at++;
    const first = text.charCodeAt(at);
    if (first === 0x30) at++;
    else if (first >= 0x31 && first <= 0x39) at = digits(text, at);
    else this.#failAt(at, "expected a digit");
    let plain = true;
    if (text.charCodeAt(at) === 0x2e) {
      const end = digits(text, at + 1);
      if (end === at + 1) this.#failAt(at + 1, "expected a digit");
      at = end;
    }
    const e = text.charCodeAt(at);
    if (e === 0x65 || e === 0x45) {
      plain = false;
      at++;
      const sign = text.charCodeAt(at);
      if (sign === 0x2b || sign === MINUS) at++;
      const end = digits(text, at);
      if (end === at) this.#failAt(at, "expected a digit");
      at = end;
    }
    this.#at = at;
    const token = text.slice(start, at);
    const value = Number(token);
    // Up to 15 digits without an exponent: a double holds it.
    if (plain && at - start <= 15) return value;
    if (Number.isFinite(value) && sameDecimal(token, String(value))) return value;
    return rawJson(token, () => `the number at ${pathOf(stack)}`);
  }

  #space(): void {
    while (isSpace(this.#text.charCodeAt(this.#at))) this.#at++;
  }

  #fail(problem: string): never {
    return this.#failAt(this.#at, problem);
  }

  #failAt(at: number, problem: string): never {
    throw new SyntaxError(`JSON text is not valid at position ${at}: ${problem}`);
  }
}

const LITERALS: readonly (readonly [string, unknown])[] = [
  ["true", true],
  ["false", false],
  ["null", null],
];

function digits(text: string, at: number): number {
  for (let c = text.charCodeAt(at); c >= 0x30 && c <= 0x39; c = text.charCodeAt(++at));
  return at;
}

/** Sets a member as `JSON.parse` does: `__proto__` is an own property, not the prototype. */
function setMember(object: Record<string, unknown>, key: string, value: unknown): void {
  if (key === "__proto__") {
    Object.defineProperty(object, key, {
      value,
      writable: true,
      enumerable: true,
      configurable: true,
    });
  } else object[key] = value;
}

/** Whether two decimal texts (JSON numbers, or what `String(number)` writes) are equal values. */
export function sameDecimal(a: string, b: string): boolean {
  return canonicalDecimal(a) === canonicalDecimal(b);
}

/** `digits e exponent`, without leading or trailing zeros, signed; `0` for any zero. */
function canonicalDecimal(text: string): string {
  const negative = text.startsWith("-");
  const e = text.search(/[eE]/);
  const mantissa = text.slice(negative ? 1 : 0, e === -1 ? undefined : e);
  const point = mantissa.indexOf(".");
  const whole = point === -1 ? mantissa : mantissa.slice(0, point);
  const fraction = point === -1 ? "" : mantissa.slice(point + 1);
  const all = (whole + fraction).replace(/^0+/, "");
  if (all === "") return "0";
  const significant = all.replace(/0+$/, "");
  const exponent = (e === -1 ? 0 : Number(text.slice(e + 1))) - fraction.length +
    (all.length - significant.length);
  return `${negative ? "-" : ""}${significant}e${exponent}`;
}

/** Where the parser is, as a path (`$.a[2]["b c"]`), for an error: keys and indexes, no values. */
function pathOf(stack: readonly Frame[]): string {
  let path = "$";
  for (const frame of stack) {
    if (frame.key === undefined) path += `[${(frame.container as unknown[]).length}]`;
    else {
      path += /^[A-Za-z_$][\w$]*$/.test(frame.key)
        ? `.${frame.key}`
        : `[${JSON.stringify(frame.key)}]`;
    }
  }
  return path;
}

function rawJson(text: string, what: () => string): ExactNumber {
  if (raw.rawJSON === undefined) {
    throw new Error(
      `${what()} has more digits than a JavaScript number holds, and this runtime has no ` +
        `JSON.rawJSON to keep it exact; run on Deno 2 or later, or send the number as a string`,
    );
  }
  return raw.rawJSON(text);
}
