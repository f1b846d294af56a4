import assert from "node:assert/strict";
import { FlowDefinitionError, MAX_SLUG_LENGTH, validateSlug } from "../../mod.ts";

Deno.test("validateSlug accepts letters, digits and single underscores", () => {
  for (const slug of ["a", "A", "thread_triage_v1", "deliverSlack", "a1_b2_c3", "x".repeat(128)]) {
    validateSlug(slug);
  }
});

Deno.test("validateSlug rejects what SQL is_valid_slug rejects", () => {
  const bad = [
    "",
    "1abc",
    "_abc",
    "abc_",
    "a__b",
    "my-flow",
    "has space",
    "ünïcode",
    "run",
    "x".repeat(MAX_SLUG_LENGTH + 1),
  ];
  for (const slug of bad) {
    assert.throws(() => validateSlug(slug), FlowDefinitionError, `expected "${slug}" to fail`);
  }
});

Deno.test("validateSlug treats only the exact word run as reserved", () => {
  validateSlug("Run");
  validateSlug("run_step");
});

Deno.test("validateSlug errors name the value and suggest a fix", () => {
  assert.throws(
    () => validateSlug("thread-triage", "flow slug"),
    (error: Error) =>
      error.message.includes('flow slug "thread-triage"') &&
      error.message.includes('write "thread_triage" instead'),
  );
  assert.throws(() => validateSlug("a__b"), /write "a_b" instead/);
  assert.throws(() => validateSlug("_lead"), /write "lead" instead/);
  assert.throws(() => validateSlug("run"), /reserved.*"run_step"/);
  assert.throws(() => validateSlug("x".repeat(129)), /129 characters long; the limit is 128/);
});
