/**
 * `parseJson` against an independent reference on thousands of seeded documents (replay with
 * RELIABILITY_SEED): every key as written (V8's JSON.parse, poisoned first, gets some wrong), every
 * number exact (a JavaScript number only when it holds the value exactly, else an ExactNumber with
 * the text), `JSON.parse`'s answer whenever the fast path is taken, and a clear error for text that
 * is not JSON.
 */
import assert from "node:assert/strict";
import { exactNumber, isExactNumber, parseJson } from "../../mod.ts";
import { needsExactParse, parseJsonb } from "../../src/util/json_parse.ts";
import { rng, seedFromEnv } from "./harness.ts";
import { randomJsonDocuments } from "./random_json.ts";

const SEED = seedFromEnv();
console.log(`json-parse seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`);

/** A JSON lexer: strings, numbers, punctuation, literals, spaces. */
const TOKEN =
  /"(?:[^"\\]|\\.)*"|-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|[{}[\],:]|true|false|null|\s+/gy;

/**
 * What the text means, built without trusting JSON.parse with keys or numbers: every key becomes
 * `k<n>` and every number the string `#<n>`, JSON.parse reads that, and the walk puts back each key
 * (decoded alone, as a string: no key cache involved) and each number's text.
 */
function reference(text: string): unknown {
  const keys: string[] = [];
  const numbers: string[] = [];
  let out = "";
  const tokens = [...text.matchAll(TOKEN)].map((m) => m[0]);
  assert.equal(tokens.join(""), text, "the lexer covers the text");
  const solid = tokens.filter((t) => !/^\s+$/.test(t));
  solid.forEach((token, i) => {
    if (token.startsWith('"') && solid[i + 1] === ":") {
      keys.push(JSON.parse(token));
      out += `"k${keys.length - 1}"`;
    } else if (/^-|^\d/.test(token)) {
      numbers.push(token);
      out += `"#${numbers.length - 1}"`;
    } else out += token;
  });
  const rebuild = (v: unknown): unknown => {
    if (typeof v === "string") {
      return v.startsWith("#") && /^#\d+$/.test(v) ? { number: numbers[Number(v.slice(1))] } : v;
    }
    if (Array.isArray(v)) return v.map(rebuild);
    if (v !== null && typeof v === "object") {
      return Object.entries(v).map(([k, item]) => [keys[Number(k.slice(1))], rebuild(item)])
        .sort(byKey);
    }
    return v;
  };
  return rebuild(JSON.parse(out));
}

/** Members in key order: JavaScript puts integer-like keys first, jsonb sorts its own way. */
function byKey(a: unknown[], b: unknown[]): number {
  return String(a[0]) < String(b[0]) ? -1 : String(a[0]) > String(b[0]) ? 1 : 0;
}

/** `value` in the reference's terms; numbers as the exact value they hold. */
function describe(value: unknown): unknown {
  if (isExactNumber(value)) return { number: value.rawJSON };
  if (typeof value === "number") return { number: value };
  if (Array.isArray(value)) return value.map(describe);
  if (value !== null && typeof value === "object") {
    return Object.entries(value).map(([k, item]) => [k, describe(item)]).sort(byKey);
  }
  return value;
}

/** `a × 10^e` of a decimal text, exactly. */
function decimal(text: string): { digits: bigint; exponent: number } {
  const m = text.match(/^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/)!;
  const fraction = m[3] ?? "";
  const digits = BigInt(m[1] + m[2] + fraction);
  return { digits, exponent: Number(m[4] ?? 0) - fraction.length };
}

function sameValue(a: string, b: string): boolean {
  const x = decimal(a);
  const y = decimal(b);
  const e = Math.min(x.exponent, y.exponent);
  return x.digits * 10n ** BigInt(x.exponent - e) === y.digits * 10n ** BigInt(y.exponent - e);
}

/** Compares what parseJson gave with the reference; a number must hold its text's exact value. */
function assertSame(got: unknown, want: unknown, where: string): void {
  if (want !== null && typeof want === "object" && "number" in want) {
    const text = (want as { number: string }).number;
    const g = got as { number: number | string };
    assert.ok(g !== null && typeof g === "object" && "number" in g, `${where}: a number`);
    if (typeof g.number === "string") {
      assert.equal(g.number, text, `${where}: exact text`);
      assert.ok(
        !Number.isFinite(Number(text)) || !sameValue(text, String(Number(text))),
        `${where}: ${text} would fit a number, yet came as text`,
      );
    } else {
      assert.ok(sameValue(text, String(g.number)), `${where}: ${text} became ${g.number}`);
    }
    return;
  }
  if (Array.isArray(want)) {
    assert.ok(Array.isArray(got), `${where}: an array`);
    assert.equal(got.length, want.length, `${where}: length`);
    want.forEach((w, i) => assertSame(got[i], w, `${where}[${i}]`));
    return;
  }
  assert.deepEqual(got, want, where);
}

function poison(): void {
  // The bug's own example: afterwards JSON.parse('{"x":1,"\\t":2}') gives the key "\\".
  JSON.parse('{"x":1,"\\\\":2}');
  JSON.parse('{"": 1, "\\\\": 2}');
}

Deno.test("the V8 bug is real here, and parseJson reads the key as written", () => {
  poison();
  const native = Object.keys(JSON.parse('{"x":1,"\\t":2}'));
  const exact = Object.keys(parseJson('{"x":1,"\\t":2}') as object);
  assert.deepEqual(exact, ["x", "\t"]);
  // Should V8 be fixed one day, this says so (and the guard could then be narrowed).
  console.log(`native JSON.parse read ${JSON.stringify(native)}`);
});

Deno.test("thousands of random documents: keys as written, numbers exact", () => {
  const documents = randomJsonDocuments({ count: 3_000, seed: SEED, maxDepth: 200 });
  let slow = 0;
  documents.forEach((text, i) => {
    poison();
    const got = parseJson(text);
    if (needsExactParse(text) || /e[-+]?\d{3}/i.test(text)) slow++;
    else {
      // As text: older Deno's node:assert compares an own "constructor" key as the constructor.
      assert.equal(
        JSON.stringify(got),
        JSON.stringify(JSON.parse(text)),
        `document ${i}: the fast path is JSON.parse`,
      );
    }
    // Postgres never writes an exponent for jsonb; without one, parseJsonb reads the same.
    if (!/\d[eE]/.test(text)) assert.deepEqual(describe(parseJsonb(text)), describe(got));
    assertSame(describe(got), reference(text), `document ${i} (seed ${SEED})`);
    // What JSON.stringify writes of it means the same (jsonb would store it unchanged).
    assertSame(describe(parseJson(JSON.stringify(got))), reference(text), `document ${i} again`);
  });
  assert.ok(slow > 1_000 && slow < 3_000, `${slow} documents took the exact parser`);
});

Deno.test("numbers: a number when a double holds the value, else its exact text", () => {
  const cases: [string, number | string][] = [
    ["0", 0],
    ["-0", -0],
    ["-0.0000000000000000000", -0],
    ["1.0", 1],
    ["1.50000000000000000000000", 1.5],
    ["100000000000000000000", 1e20],
    ["9007199254740991", 9007199254740991],
    ["9007199254740993", "9007199254740993"],
    ["12345678901234567890", "12345678901234567890"],
    ["0.1000000000000000055511151231257827", "0.1000000000000000055511151231257827"],
    ["1e400", "1e400"],
    ["-1E400", "-1E400"],
    ["1e-400", "1e-400"],
    ["4.9e-325", "4.9e-325"],
    ["5e-324", 5e-324],
    ["1.7976931348623157e308", 1.7976931348623157e308],
    ["2.5e+10", 2.5e10],
  ];
  for (const [text, want] of cases) {
    const got = parseJson(`[${text}]`) as unknown[];
    if (typeof want === "number") assert.ok(Object.is(got[0], want), `${text}: ${got[0]}`);
    else {
      assert.ok(isExactNumber(got[0]), `${text}: exact`);
      assert.equal((got[0] as { rawJSON: string }).rawJSON, want);
    }
    assert.equal(
      JSON.stringify(got),
      `[${typeof want === "number" ? JSON.stringify(want) : want}]`,
    );
  }
  assert.equal(JSON.stringify(parseJson("12345678901234567890")), "12345678901234567890");
});

Deno.test("__proto__ is an own key, as JSON.parse makes it, never the prototype", () => {
  const value = parseJson('{"__proto__": {"polluted": true}, "\\t": 1}') as Record<string, unknown>;
  assert.equal(Object.getPrototypeOf(value), Object.prototype);
  assert.deepEqual(Object.keys(value), ["__proto__", "\t"]);
  assert.deepEqual(value["__proto__"], { polluted: true });
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
});

Deno.test("nesting as deep as Postgres allows does not overflow the stack", () => {
  const depth = 100_000;
  const text = `${'{"\\t": ['.repeat(depth)}12345678901234567890${"]}".repeat(depth)}`;
  let value = parseJson(text);
  for (let d = 0; d < depth; d++) {
    value = ((value as Record<string, unknown>)["\t"] as unknown[])[0] as never;
  }
  assert.ok(isExactNumber(value));
});

Deno.test("text that is not JSON fails with its position, never its content", () => {
  const bad = [
    '{"secret\\t": tru}',
    '{"secret\\t": 1,}',
    '["secret\\t", 1',
    '{"secret\\t" 1}',
    '{"secret\\q": 1}',
    '{"secret\\u12": 1}',
    '{"secret\\t": 01234567890123456789}',
    '{"secret\\t": 1.}',
    '{"secret\\t": "a\nb"}',
    '{"secret\\t": 1} x',
    '{"secret\\t": "open',
    "",
    "12345678901234567890 secret",
  ];
  for (const text of bad) {
    assert.throws(() => JSON.parse(text), SyntaxError, text);
    assert.throws(() => parseJson(text), (e: Error) => {
      assert.ok(e instanceof SyntaxError, text);
      assert.match(e.message, /^JSON text is not valid at position \d+: /);
      assert.doesNotMatch(e.message, /secret/);
      return true;
    });
  }
});

Deno.test("the fast path: everyday text goes to JSON.parse; escaped keys, long numbers do not", () => {
  const everyday = [
    '{"id": "3e5c1e45-8b3a-4c1e-9e2f-1e4f5a6b7c8d", "at": "2026-12-05T10:00:00.123456Z"}',
    '{"text": "line one\\nline two \\"quoted\\" \\\\ back", "n": 123456789012345}',
    '{"price": 12.5, "ratio": 0.333333333333, "tags": ["a\\tb"]}',
    '["\\\\", {"k": "\\":"}]',
    // Long, but what String writes for a double: JSON.parse reads the same value.
    '{"sum": 0.30000000000000004, "total": -16.990000000000002, "id": 1234567890123456}',
    "[1.50000000000000000000000, 100000000000000000000, -0.0000000000000000000]",
  ];
  for (const text of everyday) assert.equal(needsExactParse(text), false, text);
  const careful = [
    '{"\\t": 1}',
    '{"a\\"b" : 1}',
    '{"k": 12345678901234567}',
    '{"k": 0.1000000000000000055}',
    `{"pad": "${"x".repeat(37)}", "k": 123456789.0123456789}`,
    '{"k": 0.30000000000000004, "big": 9007199254740993}',
    // Beside an exponent the run is not the whole number: 1234567890123456e-300 is not exact.
    "[1234567890123456e-300]",
    "[1e-1234567890123456]",
  ];
  for (const text of careful) assert.equal(needsExactParse(text), true, text);
  // A run of 16 digits is found at every offset (the scan looks at every 16th character).
  for (let offset = 0; offset < 40; offset++) {
    assert.equal(needsExactParse(`${" ".repeat(offset)}[12345678901234567]`), true, `${offset}`);
    assert.equal(
      needsExactParse(`${" ".repeat(offset)}[0.30000000000000004, 1, 9007199254740993]`),
      true,
      `${offset}: a run past one a double holds`,
    );
    assert.equal(needsExactParse(`${" ".repeat(offset)}[123456789012345]`), false, `${offset}`);
  }
});

Deno.test("the fast path reads what JavaScript writes for any double exactly as the exact parser", () => {
  const random = rng(SEED);
  for (let i = 0; i < 20_000; i++) {
    const x = (random() - 0.5) * 10 ** Math.floor(random() * 40 - 20);
    const text = `{"x": ${JSON.stringify(x)}, "y": [${x}]}`;
    if (!/e/i.test(text)) assert.equal(needsExactParse(text), false, text);
    const got = parseJsonb(`[${JSON.stringify(x)}]`) as unknown[];
    assert.ok(Object.is(got[0], x), `${x}`);
  }
});

Deno.test("exponents: jsonb never writes one; parseJson keeps those beyond a double exactly", () => {
  for (const text of ["1e400", "-1E400", "1e-400", "4.9E-325", "2.5e-320"]) {
    const got = parseJson(`[${text}]`) as unknown[];
    if (text === "2.5e-320") assert.equal(got[0], 2.5e-320, "what String writes back is the text");
    else assert.equal((got[0] as { rawJSON: string }).rawJSON, text);
  }
  assert.deepEqual(parseJson("[1e5, 2E-7, 1e+21, 1.5e300]"), [1e5, 2e-7, 1e21, 1.5e300]);
});

Deno.test("JSON.parse of a string (how supabase-js reads get_run_text) is exact after poisoning", () => {
  const random = rng(SEED);
  for (const text of randomJsonDocuments({ count: 500, seed: SEED + 1 })) {
    poison();
    if (random() < 0.5) JSON.parse(text);
    assert.equal(JSON.parse(JSON.stringify(text)), text);
  }
});

Deno.test("exactNumber makes an exact number from text or a bigint, and refuses anything else", () => {
  assert.equal(
    JSON.stringify({ n: exactNumber(12345678901234567890n * 3n) }),
    '{"n":37037036703703703670}',
  );
  assert.equal(
    JSON.stringify([exactNumber("-0.1000000000000000000001")]),
    "[-0.1000000000000000000001]",
  );
  assert.ok(isExactNumber(exactNumber("1")));
  assert.equal(isExactNumber({ rawJSON: "1" }), false);
  assert.equal(isExactNumber(12), false);
  for (const bad of ["", "1.", "0x10", "NaN", " 1", '"1"', "1e", "--1"]) {
    assert.throws(() => exactNumber(bad), /is not a JSON number/);
  }
});
