/**
 * Input schemas in the DSL: `new Flow({ slug, input })` takes any Standard Schema v1 and refuses
 * anything else; the schema travels with every step added; issues become one line of paths and
 * messages that never quotes the input's strings.
 */
import assert from "node:assert/strict";
import { z } from "npm:zod@3.24.2";
import { Flow, FlowDefinitionError, type StandardSchemaV1 } from "../../mod.ts";
import {
  checkInput,
  formatIssues,
  inputIssues,
  MAX_LISTED_ISSUES,
} from "../../src/dsl/input_schema.ts";

/** A hand-written schema: `{ id: string }`, with `id` trimmed. */
const idSchema: StandardSchemaV1<unknown, { id: string }> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate(value) {
      const id = (value as { id?: unknown } | null)?.id;
      return typeof id === "string"
        ? { value: { id: id.trim() } }
        : { issues: [{ message: "id must be a string", path: ["id"] }] };
    },
  },
};

Deno.test("a flow keeps its input schema through every step added; without one it has none", () => {
  const flow = new Flow({ slug: "with_schema", input: idSchema })
    .step({ slug: "a" }, (input) => input.id)
    .array({ slug: "b", dependsOn: ["a"] }, (deps) => [deps.a]);
  assert.equal(flow.inputSchema, idSchema);
  assert.equal(new Flow({ slug: "plain" }).step({ slug: "a" }, () => 1).inputSchema, undefined);
  // Not a runtime option: the schema is code, not part of the compiled options.
  assert.deepEqual(new Flow({ slug: "opts", input: idSchema, maxAttempts: 2 }).options, {
    maxAttempts: 2,
  });
});

Deno.test("anything but a Standard Schema v1 is refused, naming the option and the fix", () => {
  const bad: unknown[] = [
    null,
    "zod",
    (value: unknown) => value,
    {},
    { "~standard": null },
    { "~standard": { version: 2, vendor: "x", validate: () => ({ value: 1 }) } },
    { "~standard": { version: 1, vendor: "x" } },
  ];
  for (const input of bad) {
    assert.throws(
      () => new Flow({ slug: "bad_schema", input: input as StandardSchemaV1 }),
      (error: Error) =>
        error instanceof FlowDefinitionError &&
        /flow "bad_schema": input is not a Standard Schema v1/.test(error.message) &&
        /zod, valibot or arktype/.test(error.message),
      `input ${String(input)}`,
    );
  }
});

Deno.test("checkInput: the schema's value (transformed), its issues, an async answer", async () => {
  assert.deepEqual(await checkInput(idSchema, { id: " x " }), { ok: true, value: { id: "x" } });
  assert.deepEqual(await checkInput(idSchema, { id: 1 }), {
    ok: false,
    issues: [{ message: "id must be a string", path: ["id"] }],
  });
  const asyncSchema: StandardSchemaV1 = {
    "~standard": { version: 1, vendor: "test", validate: (value) => Promise.resolve({ value }) },
  };
  assert.deepEqual(await checkInput(asyncSchema, 5), { ok: true, value: 5 });
  const broken = {
    "~standard": { version: 1, vendor: "broken", validate: () => "yes" },
  } as unknown as StandardSchemaV1;
  await assert.rejects(checkInput(broken, 1), /input schema \(broken\) answered neither/);
});

Deno.test("issues: paths as keys and one line; the string at an issue's path is redacted", () => {
  const input = { user: { token: "sk_live_SECRET", name: "Ada" }, items: [{ "odd key": 1 }] };
  const issues = inputIssues([
    { message: 'Invalid: received "sk_live_SECRET"', path: ["user", { key: "token" }] },
    { message: "Expected number", path: ["items", 0, "odd key"] },
    { message: "Too short" },
    // A short value is left alone: replacing "Ad" would garble the message.
    { message: "Ad is fine", path: ["user", "initials"] },
  ], { ...input, user: { ...input.user, initials: "Ad" } });
  assert.deepEqual(issues.map((i) => i.path), [
    ["user", "token"],
    ["items", 0, "odd key"],
    [],
    ["user", "initials"],
  ]);
  const line = formatIssues(issues);
  assert.equal(
    line,
    'user.token: Invalid: received [redacted]; items[0]["odd key"]: Expected number; ' +
      "Too short; user.initials: Ad is fine",
  );
  assert.doesNotMatch(line, /SECRET/);
});

Deno.test("issues: at most MAX_LISTED_ISSUES are listed, the rest counted", () => {
  const many = Array.from({ length: MAX_LISTED_ISSUES + 3 }, (_, i) => ({
    message: `bad ${i}`,
    path: [i],
  }));
  const line = formatIssues(inputIssues(many, []));
  assert.equal(line.split("; ").length, MAX_LISTED_ISSUES + 1);
  assert.match(line, /; and 3 more$/);
  assert.equal(formatIssues([]), "the schema reported a failure without issues");
});

Deno.test("zod (3.24, through ~standard): issues and transformed values", async () => {
  const schema = z.object({
    email: z.string().email(),
    plan: z.enum(["free", "pro"]).default("free"),
  });
  const flow = new Flow({ slug: "zod_flow", input: schema });
  assert.deepEqual(await checkInput(flow.inputSchema!, { email: "a@b.co" }), {
    ok: true,
    value: { email: "a@b.co", plan: "free" },
  });
  const input = { email: "not-an-email", plan: "gold" };
  const check = await checkInput(flow.inputSchema!, input);
  assert.equal(check.ok, false);
  const line = formatIssues(inputIssues(check.ok ? [] : check.issues, input));
  assert.match(line, /^email: Invalid email; plan: Invalid enum value/);
  // zod's enum message quotes the value ("received 'gold'"): redacted.
  assert.doesNotMatch(line, /not-an-email|gold/);
});
