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
 * backslash inside a key, no number of more than 15 digits that `String` would not write back
 * as the same value, no big exponent: the everyday case, at native speed) and a parser of its own otherwise, which reads keys correctly and keeps every
 * number a double cannot hold as an {@link ExactNumber}.
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
 * Parses JSON text so that every key is read as written and every number is either a JavaScript
 * number that holds it exactly or an {@link ExactNumber}. Text with no backslash inside a key, no
 * run of more than 15 digits that a double does not hold, and no exponent of three digits or more
 * (the everyday case) goes to `JSON.parse` as it is. Throws a `SyntaxError` (with the position, never the text) for text that
 * is not JSON.
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
  return parse(text, needsExactParse(text) || BIG_EXPONENT.test(text));
}

/**
 * {@link parseJson} for the text Postgres writes for a `jsonb` value (`jsonb::text`, `jsonb`
 * columns): numbers there never have an exponent (1e400 is written with its 401 digits), so only
 * keys and digit runs are looked at.
 */
export function parseJsonb(text: string): Json {
  return parse(text, needsExactParse(text));
}

function parse(text: string, exact: boolean): Json {
  if (!exact) {
    try {
      return JSON.parse(text);
    } catch {
      // Not JSON. JSON.parse's message may quote the text; the parser's names a position only.
    }
  }
  return parseExactly(text);
}

/**
 * Whether `text` may hold a key with a backslash or a number a double may not hold (a run of 16 or
 * more digits and dots that `String` does not write back as the same value: a double holds any 15
 * digits). Digits in strings may count too; that costs time, never correctness.
 */
export function needsExactParse(text: string): boolean {
  const backslash = text.indexOf("\\");
  return (backslash !== -1 && escapedKey(text, backslash)) || longDigitRun(text);
}

/**
 * An exponent of three digits or more: with up to 15 digits before it (more make a long run), only
 * such an exponent can leave a double's range or its full precision (1e400, 4.9e-325).
 */
const BIG_EXPONENT = /e[-+]?\d{3}/i;

/**
 * Whether `text` has a run of 16 or more digits and dots that a double may not hold. Any 16
 * consecutive positions hold one position ≡ 15 (mod 16), so only those are looked at, and a run is
 * measured only around one that is a digit: a sixteenth of the text is read where digits are rare,
 * a few times that where not.
 *
 * A long run that `String` writes back as the same value (0.30000000000000004, what JavaScript
 * writes for a computed float) does not count: the exact parser would return `+token` for it too,
 * which is what `JSON.parse` returns (both round to the nearest double). Only a whole number token
 * is judged so: not beside an exponent (`e`, `E`, `+`), where the token is more than the run.
 */
function longDigitRun(text: string): boolean {
  const end = text.length;
  for (let probe = 15; probe < end; probe += 16) {
    if (!isDigitOrDot(text.charCodeAt(probe))) continue;
    let from = probe;
    while (from > 0 && isDigitOrDot(text.charCodeAt(from - 1))) from--;
    let to = probe + 1;
    while (to < end && isDigitOrDot(text.charCodeAt(to))) to++;
    if (to - from < 16) continue;
    if (!doubleHolds(text, from, to)) return true;
    while (probe + 16 < to) probe += 16;
  }
  return false;
}

/** Whether the run `text[from, to)` is a number token `String` writes back as the same value. */
function doubleHolds(text: string, from: number, to: number): boolean {
  const after = text.charCodeAt(to);
  const before = text.charCodeAt(
    from > 0 && text.charCodeAt(from - 1) === MINUS ? from - 2 : from - 1,
  );
  if (isExponentMark(after) || isExponentMark(before)) return false;
  const run = text.slice(from, to);
  const value = +run;
  if (!Number.isFinite(value)) return false;
  // What JavaScript wrote is written back as it was: no need to compare values.
  const back = String(value);
  return back === run || sameDecimal(run, back);
}

function isExponentMark(c: number): boolean {
  return c === 0x65 || c === 0x45 || c === 0x2b;
}

function isDigitOrDot(c: number): boolean {
  return (c >= 0x30 && c <= 0x39) || c === 0x2e;
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

/** What each one-character escape stands for, by the escape's character code. */
const ESCAPES: readonly (string | undefined)[] = (() => {
  const table: (string | undefined)[] = [];
  const pairs: [string, string][] = [
    ['"', '"'],
    ["\\", "\\"],
    ["/", "/"],
    ["b", "\b"],
    ["f", "\f"],
    ["n", "\n"],
    ["r", "\r"],
    ["t", "\t"],
  ];
  for (const [escape, char] of pairs) table[escape.charCodeAt(0)] = char;
  return table;
})();

/** One container being filled: its key (objects) or `undefined` (arrays). */
interface Frame {
  readonly container: Record<string, unknown> | unknown[];
  key: string | undefined;
}

/**
 * A JSON parser that reads each key from its own text and keeps numbers a double cannot hold as
 * {@link ExactNumber}s. Iterative, so nesting as deep as Postgres allows cannot overflow the
 * stack; a string without escapes is one slice of the text; raw control characters are looked
 * for in strings only when the text has any (Postgres never writes one).
 */
function parseExactly(text: string): Json {
  const end = text.length;
  const strict = CONTROL.test(text);
  const stack: Frame[] = [];
  let at = 0;
  /** The next backslash at or after the current string's start (`end` when there is none). */
  let slash = -1;

  const fail = (where: number, problem: string): never => {
    throw new SyntaxError(`JSON text is not valid at position ${where}: ${problem}`);
  };
  const space = () => {
    let c = text.charCodeAt(at);
    while (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) c = text.charCodeAt(++at);
  };
  const string = (): string => {
    const start = at + 1;
    let quote = text.indexOf('"', start);
    if (quote === -1) fail(at, "unterminated string");
    if (slash < start) {
      slash = text.indexOf("\\", start);
      if (slash === -1) slash = end;
    }
    let out = "";
    let from = start;
    while (slash < quote) {
      const part = text.slice(from, slash);
      if (strict && CONTROL.test(part)) fail(from, "control character in a string");
      out += part;
      const escape = text.charCodeAt(slash + 1);
      if (escape === 0x75 /* u */) {
        const hex = text.slice(slash + 2, slash + 6);
        if (!HEX4.test(hex)) fail(slash, "bad \\u escape");
        out += String.fromCharCode(parseInt(hex, 16));
        from = slash + 6;
      } else {
        const char = ESCAPES[escape];
        if (char === undefined) fail(slash, "bad escape");
        out += char;
        from = slash + 2;
      }
      slash = text.indexOf("\\", from);
      if (slash === -1) slash = end;
      if (quote < from) {
        quote = text.indexOf('"', from);
        if (quote === -1) fail(at, "unterminated string");
      }
    }
    const tail = text.slice(from, quote);
    if (strict && CONTROL.test(tail)) fail(from, "control character in a string");
    at = quote + 1;
    return from === start ? tail : out + tail;
  };
  const key = (): string => {
    if (text.charCodeAt(at) !== QUOTE) fail(at, "expected a key");
    const name = string();
    space();
    if (text.charCodeAt(at) !== COLON) fail(at, "expected :");
    at++;
    space();
    return name;
  };
  const digits = (from: number): number => {
    let c = text.charCodeAt(from);
    while (c >= 0x30 && c <= 0x39) c = text.charCodeAt(++from);
    return from;
  };
  const number = (): number | ExactNumber => {
    const start = at;
    let i = start;
    if (text.charCodeAt(i) === MINUS) i++;
    const first = text.charCodeAt(i);
    if (first === 0x30) i++;
    else if (first >= 0x31 && first <= 0x39) i = digits(i + 1);
    else fail(i, "expected a digit");
    let plain = true;
    if (text.charCodeAt(i) === 0x2e) {
      const after = digits(i + 1);
      if (after === i + 1) fail(i + 1, "expected a digit");
      i = after;
    }
    const e = text.charCodeAt(i);
    if (e === 0x65 || e === 0x45) {
      plain = false;
      i++;
      const sign = text.charCodeAt(i);
      if (sign === 0x2b || sign === MINUS) i++;
      const after = digits(i);
      if (after === i) fail(i, "expected a digit");
      i = after;
    }
    at = i;
    const token = text.slice(start, i);
    const value = +token;
    // Up to 15 digits without an exponent: a double holds it.
    if (plain && i - start <= 15) return value;
    if (Number.isFinite(value) && sameDecimal(token, String(value))) return value;
    return rawJson(token, () => `the number at ${pathOf(stack)}`);
  };
  const scalar = (): unknown => {
    const c = text.charCodeAt(at);
    if (c === QUOTE) return string();
    if (c === MINUS || (c >= 0x30 && c <= 0x39)) return number();
    if (c === 0x74 && text.startsWith("true", at)) {
      at += 4;
      return true;
    }
    if (c === 0x66 && text.startsWith("false", at)) {
      at += 5;
      return false;
    }
    if (c === 0x6e && text.startsWith("null", at)) {
      at += 4;
      return null;
    }
    return fail(at, at >= end ? "unexpected end" : "expected a value");
  };

  let value: unknown;
  for (;;) {
    // A value starts here: a scalar completes at once, a container opens a frame.
    space();
    const c = text.charCodeAt(at);
    if (c === OPEN_BRACE || c === OPEN_BRACKET) {
      at++;
      space();
      const array = c === OPEN_BRACKET;
      if (text.charCodeAt(at) === (array ? CLOSE_BRACKET : CLOSE_BRACE)) {
        at++;
        value = array ? [] : {};
      } else {
        stack.push({ container: array ? [] : {}, key: array ? undefined : key() });
        continue;
      }
    } else {
      value = scalar();
    }
    // A value is complete: it goes into its container, and containers that end complete too.
    for (;;) {
      const top = stack[stack.length - 1];
      if (top === undefined) {
        space();
        if (at !== end) fail(at, "unexpected text after the value");
        return value as Json;
      }
      const inObject = top.key !== undefined;
      if (inObject) setMember(top.container as Record<string, unknown>, top.key!, value);
      else (top.container as unknown[]).push(value);
      space();
      const next = text.charCodeAt(at);
      if (next === COMMA) {
        at++;
        if (inObject) {
          space();
          top.key = key();
        }
        break;
      }
      if (next !== (inObject ? CLOSE_BRACE : CLOSE_BRACKET)) {
        fail(at, inObject ? "expected , or }" : "expected , or ]");
      }
      at++;
      stack.pop();
      value = top.container;
    }
  }
}

const HEX4 = /^[0-9a-fA-F]{4}$/;

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
function sameDecimal(a: string, b: string): boolean {
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
