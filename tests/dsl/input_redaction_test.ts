/**
 * An input schema's messages never carry the input's values out: every value, whatever its type
 * and however the library prints it (valibot's `received 4111111111111111` and `received "gold"`,
 * zod's `received 'gold'`, arktype's `(was false)` and JSON, a custom message's unquoted, grouped
 * or exponent forms), is replaced by `[redacted]`, while the schema's own words stay readable.
 * The schemas here are hand-written Standard Schema v1 objects that print as those libraries do.
 */
import assert from "node:assert/strict";
import type { StandardSchemaV1, StandardSchemaV1Issue } from "../../mod.ts";
import { checkInput, formatIssues, inputIssues } from "../../src/dsl/input_schema.ts";
import { MAX_MESSAGE_CHARS } from "../../src/dsl/input_redaction.ts";

const INPUT = {
  card: 4111111111111111,
  cvv: 123,
  age: 17,
  plan: "gold",
  email: "  Ada@Example.COM ",
  agree: false,
  nick: null,
  tags: ["vip", 42],
  big: 1e21,
  ratio: 0.000001234,
  quote: 'say "hi"',
  nested: { ssn: "123-45-6789", pin: 4321 },
};

/** What no redacted message may hold: the distinctive values of INPUT, as any library prints them. */
const LEAKS = /4111|4\.111|ada@|123-45|4321|4,321|gold|1e\+?21|1\.234e|0\.000001234|say/i;

/** valibot 1.x prints a received value this way (`_stringify`). */
function valibotPrint(value: unknown): string {
  if (typeof value === "string") return `"${value}"`;
  if (["number", "bigint", "boolean"].includes(typeof value)) return `${value}`;
  if (value === null) return "null";
  return typeof value === "object" ? (value as object).constructor.name : typeof value;
}

/** A schema for INPUT's shape whose messages are valibot's. */
const valibotLike: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "valibot-like",
    validate(value) {
      const v = value as Record<string, unknown>;
      const issues: StandardSchemaV1Issue[] = [];
      const expect = (key: string, ok: boolean, expected: string) => {
        if (!ok) {
          issues.push({
            message: `Invalid type: Expected ${expected} but received ${valibotPrint(v[key])}`,
            path: [{ key }],
          });
        }
      };
      expect("card", typeof v.card === "string", "string");
      if (typeof v.age === "number" && v.age < 18) {
        issues.push({
          message: `Invalid value: Expected >=18 but received ${v.age}`,
          path: [{ key: "age" }],
        });
      }
      expect("plan", v.plan === "free" || v.plan === "pro", '("free" | "pro")');
      const email = String(v.email).trim().toLowerCase(); // pipe(trim(), toLowerCase(), email())
      if (!/^[^@\s]+@[^@\s]+\.[a-z]{2,}$/.test(email) || email.endsWith(".com")) {
        issues.push({ message: `Invalid email: Received "${email}"`, path: [{ key: "email" }] });
      }
      expect("agree", v.agree === true, "true");
      expect("nick", typeof v.nick === "string", "string");
      return issues.length > 0 ? { issues } : { value };
    },
  },
};

/** A schema whose messages are arktype's: `must be … (was …)`, values as JSON. */
const arktypeLike: StandardSchemaV1 = {
  "~standard": {
    version: 1,
    vendor: "arktype-like",
    validate(value) {
      const v = value as Record<string, unknown>;
      return {
        issues: [
          { message: `card must be a string (was ${typeof v.card})`, path: ["card"] },
          { message: `age must be at most 42 (was ${v.age})`, path: ["age"] },
          { message: `agree must be true (was ${v.agree})`, path: ["agree"] },
          { message: `nick must be a string (was ${v.nick})`, path: ["nick"] },
          {
            message: `nested must be an array (was ${JSON.stringify(v.nested)})`,
            path: ["nested"],
          },
          {
            message: `tags[1] must be a string (was ${(v.tags as unknown[])[1]})`,
            path: ["tags", 1],
          },
        ],
      };
    },
  },
};

Deno.test("valibot's messages: a number, a string, a boolean, null and a transformed string are redacted", async () => {
  const check = await checkInput(valibotLike, INPUT);
  assert.ok(!check.ok);
  const issues = inputIssues(check.issues, INPUT);
  assert.deepEqual(issues.map((i) => [i.path.join("."), i.message]), [
    ["card", "Invalid type: Expected string but received [redacted]"],
    ["age", "Invalid value: Expected >=18 but received [redacted]"],
    ["plan", 'Invalid type: Expected ("free" | "pro") but received [redacted]'],
    ["email", "Invalid email: Received [redacted]"],
    ["agree", "Invalid type: Expected true but received [redacted]"],
    ["nick", "Invalid type: Expected string but received [redacted]"],
  ]);
  assert.doesNotMatch(formatIssues(issues), LEAKS);
});

Deno.test("arktype's messages: values in (was …), JSON of a nested value; the schema's words stay", async () => {
  const check = await checkInput(arktypeLike, INPUT);
  assert.ok(!check.ok);
  const issues = inputIssues(check.issues, INPUT);
  assert.deepEqual(issues.map((i) => i.message), [
    "card must be a string (was number)",
    // 42 is a value elsewhere in the input, too short to be taken for data: the bound stays.
    "age must be at most 42 (was [redacted])",
    "agree must be true (was [redacted])",
    "nick must be a string (was [redacted])",
    'nested must be an array (was {"ssn":[redacted],"pin":[redacted]})',
    // At the issue's path a value is redacted however short.
    "tags[1] must be a string (was [redacted])",
  ]);
  assert.doesNotMatch(formatIssues(issues), LEAKS);
});

Deno.test("zod's and custom messages: quotes of every kind, grouped, exponent and unquoted forms, values elsewhere", () => {
  const cases: [StandardSchemaV1Issue, string][] = [
    [
      { message: "Invalid enum value. Expected 'free' | 'pro', received 'gold'", path: ["plan"] },
      "Invalid enum value. Expected 'free' | 'pro', received [redacted]",
    ],
    [
      { message: "Expected string, received number", path: ["card"] },
      "Expected string, received number",
    ],
    [
      { message: "card 4,111,111,111,111,111 declined", path: ["card"] },
      "card [redacted] declined",
    ],
    [{ message: "received 4.111111111111111e+15.", path: ["card"] }, "received [redacted]."],
    [{ message: "4111111111111111 is not a string", path: ["card"] }, "[redacted] is not a string"],
    [{ message: "too big: 1e21 (1e+21)", path: ["big"] }, "too big: [redacted] ([redacted])"],
    [{ message: "ratio 0.000001234 = 1.234e-6", path: ["ratio"] }, "ratio [redacted] = [redacted]"],
    [{ message: 'got "say \\"hi\\""', path: ["quote"] }, "got [redacted]"],
    [{ message: "got `gold`", path: ["plan"] }, "got [redacted]"],
    // A value of another field, quoted by a custom message: still data.
    [
      { message: "gold is not sold to ada@example.com (card 4111111111111111)", path: ["plan"] },
      "[redacted] is not sold to [redacted] (card [redacted])",
    ],
    [
      { message: "pin 4321 and ssn 123-45-6789 do not match", path: [] },
      "pin [redacted] and ssn [redacted] do not match",
    ],
    // A number is never found inside a longer one.
    [
      { message: "expected 170 or 1.17 or 17.5, received 17", path: ["age"] },
      "expected 170 or 1.17 or 17.5, received [redacted]",
    ],
    // A short string only when quoted; words that merely contain a value stay.
    [{ message: "Vipers are not vip", path: ["tags", 0] }, "Vipers are not [redacted]"],
  ];
  for (const [issue, message] of cases) {
    const [redacted] = inputIssues([issue], INPUT);
    assert.equal(redacted.message, message, issue.message);
  }
});

Deno.test("a message about the whole input redacts every value in it; keys are the path and stay", () => {
  const [whole] = inputIssues([{ message: `bad input ${JSON.stringify(INPUT)}` }], INPUT);
  assert.doesNotMatch(whole.message, LEAKS);
  assert.doesNotMatch(whole.message, /:17|false|null|:42|"vip"/);
  assert.match(whole.message, /"card":\[redacted\],"cvv":\[redacted\]/);
  const [nested] = inputIssues([{ message: "Invalid format", path: ["nested", "ssn"] }], INPUT);
  assert.equal(formatIssues([nested]), "nested.ssn: Invalid format");
});

Deno.test("a long message is redacted, then cut; a deep or cyclic input is walked without recursion", () => {
  const [long] = inputIssues([{ message: "x ".repeat(MAX_MESSAGE_CHARS) + "gold" }], INPUT);
  assert.equal(long.message.length, MAX_MESSAGE_CHARS + " … [cut]".length);
  // Where the cut falls inside a value, what is left of it is not shown either.
  const at = MAX_MESSAGE_CHARS - "received ".length - 8;
  const [split] = inputIssues([{ message: `${"x".repeat(at)} received 4111111111111111` }], INPUT);
  assert.doesNotMatch(split.message, /4111/);
  let deep: unknown = "deep-secret";
  for (let i = 0; i < 100_000; i++) deep = [deep];
  const [found] = inputIssues([{ message: 'saw "deep-secret"' }], deep);
  assert.equal(found.message, "saw [redacted]");
  const cyclic: Record<string, unknown> = { token: "cyc-secret" };
  cyclic.self = cyclic;
  assert.equal(inputIssues([{ message: "cyc-secret" }], cyclic)[0].message, "[redacted]");
});
