/**
 * What a handler's error becomes: `fail_task` stores its text capped at MAX_ERROR_CHARS (a thrown
 * object is serialised only that far, never whole; U+0000 is replaced, as Postgres text cannot
 * hold it), and log lines carry only its kind, code and length, never the text (which may quote
 * input: logs never print bodies).
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import {
  errorFields,
  errorMessage,
  MAX_ERROR_CHARS,
  MAX_LOGGED_ERROR_CHARS,
} from "../../src/dispatch/result.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

Deno.test("the stored error text is capped, and a thrown object is serialised only that far", () => {
  assert.equal(errorMessage(new Error("boom")), "boom");
  assert.equal(errorMessage(new TypeError("")), "TypeError");
  assert.equal(errorMessage("plain"), "plain");
  assert.equal(errorMessage({ code: "E1", n: 2n }), '{"code":"E1","n":"2"}');
  assert.equal(errorMessage(undefined), "undefined");
  assert.equal(errorMessage(new Error("a\u0000b")), "a\uFFFDb");

  const long = errorMessage(new Error("e".repeat(10_000)));
  assert.equal(long.length, MAX_ERROR_CHARS);
  assert.match(long, /^e+ … \[cut, 10000 characters in all\]$/);

  let visited = false;
  const thrown = {
    body: "x".repeat(100_000),
    get later() {
      visited = true;
      return 1;
    },
  };
  const text = errorMessage(thrown);
  assert.ok(text.length <= MAX_ERROR_CHARS);
  assert.ok(text.startsWith('{"body":"xxx'));
  assert.equal(visited, false, "nothing past the cap is visited");

  const cycle: Record<string, unknown> = { a: 1 };
  cycle.self = cycle;
  assert.equal(errorMessage(cycle), '{"a":1,"self":"[cycle]"}');
  // Never a split surrogate pair at the cut.
  assert.doesNotMatch(errorMessage("😀".repeat(3_000)), /[\uD800-\uDBFF](?![\uDC00-\uDFFF])/);

  assert.deepEqual(errorFields(new RangeError("quota 42\n  at handler (x.ts:1)")), {
    errorKind: "RangeError",
    errorLength: 30,
    error: "quota 42",
  });
  assert.deepEqual(errorFields(Object.assign(new Error("x"), { code: "ECONNRESET" })), {
    errorKind: "Error",
    errorCode: "ECONNRESET",
    errorLength: 1,
    error: "x",
  });
  assert.deepEqual(errorFields({ body: "b" }), { errorKind: "object Object", errorLength: 12 });
  assert.deepEqual(errorFields("s"), { errorKind: "string", errorLength: 1, error: "s" });
  const logged = errorFields(new Error("e".repeat(5_000))).error!;
  assert.equal(logged.length, MAX_LOGGED_ERROR_CHARS);
  assert.match(logged, /^e+ … \[cut\]$/);
});

const flow = new Flow<{ kind: string; email: string }>({ slug: "error_text", maxAttempts: 1 })
  .step({ slug: "work" }, (input) => {
    if (input.kind === "error") throw new Error(`card 4111-1111 declined for ${input.email}`);
    if (input.kind === "nul") throw new Error(`bad byte \u0000 in ${input.email}`);
    throw { response: "B".repeat(1_000_000), token: "s3cret-token" };
  });

db.test("a handler's error is stored capped; the log has its first line, never a thrown object", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const stored: Record<string, string> = {};
    for (const kind of ["error", "nul", "object"]) {
      const run = await startRun(sql, "error_text", { kind, email: "ann@example.com" });
      assert.equal((await waitForRun(sql, run)).status, "failed");
      const [task] = await sql<{ error_message: string }[]>`
        select error_message from pgflow.step_tasks where run_id = ${run}::uuid`;
      stored[kind] = task.error_message;
    }
    assert.equal(stored.error, "card 4111-1111 declined for ann@example.com");
    assert.equal(stored.nul, "bad byte \uFFFD in ann@example.com");
    assert.equal(stored.object.length, MAX_ERROR_CHARS);
    assert.match(stored.object, /^\{"response":"B+ … \[cut\]$/);

    // The input itself is never logged; an error's own message is (so it should not quote input),
    // a thrown object (a response, a record: data) never is.
    const text = JSON.stringify(logs);
    for (const secret of ["s3cret", "BBBB"]) {
      assert.ok(!text.includes(secret), `a log line quotes ${secret}`);
    }
    // The run is failed in the database before the worker hears back and logs it.
    const failedLines = () => logs.filter((l) => l.event === "task failed");
    await waitFor(() => failedLines().length >= 3, { what: "three failure lines" });
    const failed = failedLines();
    assert.deepEqual(failed.map((l) => [l.level, l.fields.errorKind, l.fields.error]), [
      ["error", "Error", "card 4111-1111 declined for ann@example.com"],
      ["error", "Error", "bad byte \uFFFD in ann@example.com"],
      ["error", "object Object", undefined],
    ]);
  } finally {
    await stopAll(workers);
  }
});
