/**
 * `jsonText`: JSON.stringify's text for what jsonb stores as it is; a path-naming error for what
 * would be stored as something else (NaN, ±Infinity) or refused (U+0000, a lone surrogate, a
 * bigint), wherever it hides (keys, arrays, toJSON results, boxed values); never a false alarm for
 * text that merely looks like an escape.
 */
import assert from "node:assert/strict";
import { exactNumber } from "../../mod.ts";
import { jsonText, JsonValueError } from "../../src/util/json_write.ts";

function problem(value: unknown, root = "output"): string {
  try {
    jsonText(value, root);
  } catch (error) {
    assert.ok(error instanceof JsonValueError, String(error));
    return error.message;
  }
  assert.fail("no error");
}

Deno.test("what jsonb stores as it is comes back as JSON.stringify's text", () => {
  const values: unknown[] = [
    { a: 1, b: [true, null, "x"], c: { d: -0.5 } },
    "literal backslash-u: \\u0000 and \\ud800 are text, not escapes",
    { "key \\u0000": "\\\\u0000" },
    "a pair: 😀, and \ud83d\ude00 written as escapes",
    { at: new Date(0), n: new Number(3), s: new String("s") },
    { skipped: undefined, fn: () => 1, kept: null },
    [exactNumber("12345678901234567890"), exactNumber("1e400")],
    null,
    "null",
  ];
  for (const value of values) assert.equal(jsonText(value), JSON.stringify(value));
  assert.equal(jsonText(undefined), undefined);
  assert.equal(jsonText(() => 1), undefined);
});

Deno.test("NaN and ±Infinity, which JSON.stringify writes as null, fail naming their path", () => {
  assert.equal(
    problem({ stats: [{ mean: 1 }, { mean: NaN }] }),
    "output.stats[1].mean is NaN, which JSON cannot hold (it would be stored as null); use null or a string",
  );
  assert.match(problem({ "odd key": Infinity }), /^output\["odd key"\] is Infinity, /);
  assert.match(problem(-Infinity, "input"), /^input is -Infinity, /);
  assert.match(problem({ boxed: new Number(NaN) }), /^output\.boxed is NaN/);
  assert.match(
    problem({ viaToJSON: { toJSON: () => ({ x: NaN }) } }),
    /^output\.viaToJSON\.x is NaN/,
  );
});

Deno.test("U+0000 and lone surrogates, which jsonb refuses, fail naming their path, not the text", () => {
  const secret = "card 4242";
  assert.equal(
    problem({ rows: [{ note: `${secret}\u0000` }] }),
    "output.rows[0].note is a string with U+0000, which Postgres jsonb cannot store; remove it, or encode the text (e.g. base64)",
  );
  assert.match(
    problem({ half: `${secret}\ud800` }),
    /^output\.half is a string with a lone surrogate/,
  );
  assert.match(problem([`\udc00${secret}`]), /^output\[0\] is a string with a lone surrogate/);
  assert.match(
    problem({ [`${secret}\u0000`]: 1 }),
    /^output\["card 4242\uFFFD"\] is a key with U\+0000/,
  );
  for (const value of [{ a: `${secret}\u0000` }, { [`${secret}\ud800`]: 1 }]) {
    // The path may show a key; a value never.
    assert.doesNotMatch(problem({ nested: value }).split(" is ")[1], /4242/);
  }
});

Deno.test("a bigint fails naming its path and the two ways to return it", () => {
  assert.equal(
    problem({ total: 10n }),
    "output.total is a bigint, which JSON.stringify cannot write; use exactNumber(n) for an exact JSON number, or String(n)",
  );
  assert.match(problem([[1n]], "input"), /^input\[0\]\[0\] is a bigint/);
});

Deno.test("other errors are JSON.stringify's own (a cycle)", () => {
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  assert.throws(() => jsonText(cycle), (e: Error) => !(e instanceof JsonValueError));
});
