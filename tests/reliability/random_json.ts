/**
 * Random JSON documents as text, for property tests of what a run carries: escaped keys of every
 * kind (the V8 `JSON.parse` key-cache bug reads a later escaped key as an earlier one), unicode,
 * deep nesting, object shapes repeated with one key varied, integers beyond 2^53, decimals with
 * more digits than a double keeps, exponents, `-0`. Only what `jsonb` accepts (no U+0000, no lone
 * surrogate). Text, not values: a JavaScript value cannot hold most of these numbers.
 *
 * @module
 */
import { rng } from "./harness.ts";

/** Keys made of one escape: the V8 bug's favourite (`"\\"` then `"\t"` in an object of one shape). */
export const ESCAPED_ONE_CHAR_KEYS: readonly string[] = [
  "\\\\",
  "\\t",
  "\\n",
  '\\"',
  "\\/",
  "\\b",
  "\\f",
  "\\r",
  "\\u0001",
  "\\u001f",
  "\\u0041",
  "\\u00e9",
  "\\u2028",
  "\\uffff",
  "\\ud83d\\ude00",
];

/** Other key texts: empty, plain, raw unicode, escapes among letters, names JS treats specially. */
const OTHER_KEYS: readonly string[] = [
  "",
  "a",
  "x",
  "A",
  "é",
  "😀",
  "中文",
  "a\\tb",
  "x\\\\y",
  "\\\\b",
  'say \\"hi\\"',
  "line\\nbreak",
  "\\u00e9t\\u00e9",
  "__proto__",
  "constructor",
  "toString",
  "0",
  "1",
  "10",
  "-1",
];

/** Number texts a double cannot hold exactly, or holds only after rounding. */
const HARD_NUMBERS: readonly string[] = [
  "12345678901234567890",
  "-12345678901234567890",
  "9007199254740993",
  "18446744073709551616",
  "123456789012345678901234567890123456789",
  "0.1000000000000000055511151231257827",
  "3.14159265358979323846264338327950288",
  "-2.718281828459045235360287471352662497757",
  "1.00000000000000000001",
  "1e400",
  "-1E400",
  "1e-400",
  "2.5e+300",
  "1.7976931348623157e309",
  "4.9e-325",
  "123456789.123456789",
];

/** Number texts a double holds (as jsonb compares them): exponents, zeros with signs, big ints. */
const EASY_NUMBERS: readonly string[] = [
  "0",
  "-0",
  "0.0",
  "-0.0",
  "1.0",
  "1.50",
  "100",
  "-7",
  "0.1",
  "1e3",
  "1E-7",
  "2.5e+10",
  "9007199254740991",
  "1e20",
  "100000000000000000000",
  "5e-324",
  "1.7976931348623157e308",
];

/** Pieces of string text: plain, escapes of every kind, raw unicode, surrogate pairs escaped. */
const STRING_PIECES: readonly string[] = [
  "a",
  "hello",
  " ",
  "é",
  "😀",
  "中",
  "\u2028",
  ...ESCAPED_ONE_CHAR_KEYS,
  "\\u0007",
  "12345678901234567890",
  "1e5",
];

/** What {@link randomJsonDocuments} makes. */
export interface RandomJsonOptions {
  /** How many documents. */
  readonly count: number;
  /** The seed (print it when a test fails, to replay). */
  readonly seed: number;
  /** Deepest nesting of the deep documents; default 64. */
  readonly maxDepth?: number;
}

/**
 * `count` JSON texts. The first ones are the shapes the bug is known by (`{"": 1, "\\": 2}` then
 * `{"": 1, "\t": 2}`, nested too, and the number 12345678901234567890); then random documents, a
 * quarter of them objects of one repeated shape whose one varying key is an escaped character.
 */
export function randomJsonDocuments(options: RandomJsonOptions): string[] {
  const random = rng(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
  const maxDepth = options.maxDepth ?? 64;

  const number = (): string => {
    const r = random();
    if (r < 0.35) return pick(HARD_NUMBERS);
    if (r < 0.6) return pick(EASY_NUMBERS);
    if (r < 0.8) return String(Math.floor(random() * 2_000_001) - 1_000_000);
    // A long integer or decimal of random digits.
    const digits = Array.from(
      { length: 16 + Math.floor(random() * 30) },
      () => Math.floor(random() * 10),
    ).join("").replace(/^0+/, "1");
    const point = Math.floor(random() * digits.length);
    return (random() < 0.3 ? "-" : "") +
      (point === 0 ? digits : `${digits.slice(0, point)}.${digits.slice(point)}`);
  };
  const string = (): string =>
    `"${Array.from({ length: Math.floor(random() * 5) }, () => pick(STRING_PIECES)).join("")}"`;
  const key = (): string =>
    random() < 0.5
      ? pick(ESCAPED_ONE_CHAR_KEYS)
      : random() < 0.7
      ? pick(OTHER_KEYS)
      : pick(ESCAPED_ONE_CHAR_KEYS) + pick(OTHER_KEYS);

  const value = (depth: number): string => {
    const r = random();
    if (depth > 4 || r < 0.45) {
      const s = random();
      if (s < 0.45) return number();
      if (s < 0.8) return string();
      return pick(["true", "false", "null"]);
    }
    if (r < 0.7) return object(depth);
    return `[${
      Array.from({ length: Math.floor(random() * 5) }, () => value(depth + 1)).join(",")
    }]`;
  };
  const object = (depth: number): string => {
    const seen = new Set<string>();
    const members: string[] = [];
    for (let i = Math.floor(random() * 6); i > 0; i--) {
      const k = key();
      // jsonb keeps the last of duplicate keys; distinct keys keep the comparison simple.
      const decoded = JSON.parse(`"${k}"`) as string;
      if (seen.has(decoded)) continue;
      seen.add(decoded);
      members.push(`"${k}": ${value(depth + 1)}`);
    }
    return `{${members.join(", ")}}`;
  };
  /** Objects of one shape, its last key one escaped character that changes each time. */
  const shaped = (): string => {
    const base = ["", "x", "a\\tb"].slice(0, 1 + Math.floor(random() * 3));
    const variants = Array.from(
      { length: 2 + Math.floor(random() * 4) },
      () => pick(ESCAPED_ONE_CHAR_KEYS),
    );
    const one = (last: string) =>
      `{${
        [...base, last].map((k, i) => `"${k}": ${i === base.length ? number() : i}`).join(", ")
      }}`;
    return random() < 0.5 ? one(variants[0]) : `[${variants.map(one).join(", ")}]`;
  };
  const deep = (): string => {
    const depth = 8 + Math.floor(random() * (maxDepth - 8));
    let text = value(5);
    for (let d = 0; d < depth; d++) {
      text = random() < 0.5 ? `[${text}]` : `{"${pick(ESCAPED_ONE_CHAR_KEYS)}": ${text}}`;
    }
    return text;
  };

  const known = [
    '{"": 1, "\\\\": 2}',
    '{"": 1, "\\t": 2}',
    '{"": 1, "\\"": 2}',
    '{"": 1, "\\n": 2}',
    '{"outer": {"": 1, "\\\\": 2}, "list": [{"": 1, "\\t": 2}, {"": 1, "\\n": 2}]}',
    '{"n": 12345678901234567890}',
    "12345678901234567890",
  ];
  const documents = known.slice(0, options.count);
  while (documents.length < options.count) {
    const r = random();
    documents.push(r < 0.25 ? shaped() : r < 0.35 ? deep() : r < 0.9 ? object(0) : value(0));
  }
  return documents;
}
