/**
 * What a handler's error becomes: `fail_task` stores its text capped at MAX_ERROR_CHARS (a thrown
 * object is serialised only that far, never whole; U+0000 is replaced, as Postgres text cannot
 * hold it) and kept in the attempt history, and log lines carry only its kind, code and length:
 * the text of an error from the flow's code (which may quote personal data) only with the worker
 * option `logErrorMessages`, the engine's own words always, a thrown object never.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import {
  errorFields,
  errorMessage,
  MAX_ERROR_CHARS,
  MAX_LOGGED_ERROR_CHARS,
} from "../../src/task/result.ts";
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
    if (input.kind === "error") throw new Error(`SMTP 550: mailbox ${input.email} unavailable`);
    if (input.kind === "nul") throw new Error(`bad byte \u0000 in ${input.email}`);
    throw { response: "B".repeat(1_000_000), token: "s3cret-token" };
  });
const arrayFlow = new Flow<{ kind: string; email: string }>({
  slug: "error_text_array",
  maxAttempts: 1,
}).array({ slug: "list" }, () => null as unknown as string[]);

/** Runs one failing run per kind; the stored error of each, and the worker's failure lines. */
async function failEach(
  sql: Parameters<Parameters<typeof db.test>[1]>[0]["sql"],
  logs: { event: string; level: string; fields: Record<string, unknown> }[],
  slug: string,
  kinds: readonly string[],
) {
  const stored: Record<string, { task: string; attempt: string }> = {};
  for (const kind of kinds) {
    const run = await startRun(sql, slug, { kind, email: "c0@bounce.test" });
    assert.equal((await waitForRun(sql, run)).status, "failed");
    const [row] = await sql<{ task: string; attempt: string }[]>`
      select t.error_message as task, a.error_message as attempt
        from pgflow.step_tasks t
        join pgflow.task_attempts a using (run_id, step_slug, task_index)
       where t.run_id = ${run}::uuid`;
    stored[kind] = row;
  }
  // The run is failed in the database before the worker hears back and logs it.
  const failedLines = () => logs.filter((l) => l.event === "task failed");
  await waitFor(() => failedLines().length >= kinds.length, {
    what: `${kinds.length} failure lines`,
  });
  return { stored, failed: failedLines() };
}

db.test("a handler's error text is stored capped and kept out of logs unless logErrorMessages", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const quiet = await startWorker(workers, flow, { connectionString: url });
    const { stored, failed } = await failEach(sql, quiet.logs, "error_text", [
      "error",
      "nul",
      "object",
    ]);
    // The attempt history keeps the whole text (personal data included: it is the record).
    assert.equal(stored.error.task, "SMTP 550: mailbox c0@bounce.test unavailable");
    assert.equal(stored.error.attempt, stored.error.task);
    assert.equal(stored.nul.task, "bad byte \uFFFD in c0@bounce.test");
    assert.equal(stored.object.task.length, MAX_ERROR_CHARS);
    assert.match(stored.object.task, /^\{"response":"B+ … \[cut\]$/);

    // By default no line quotes the handler's text: its kind, code and length say what it was.
    const text = JSON.stringify(quiet.logs);
    for (const secret of ["bounce.test", "SMTP", "s3cret", "BBBB"]) {
      assert.ok(!text.includes(secret), `a log line quotes ${secret}`);
    }
    assert.deepEqual(failed.map((l) => [l.level, l.fields.errorKind, l.fields.errorLength]), [
      ["error", "Error", stored.error.task.length],
      ["error", "Error", stored.nul.task.length],
      ["error", "object Object", MAX_ERROR_CHARS],
    ]);
    assert.ok(failed.every((l) => !("error" in l.fields)), "no error field");
    // The engine's own words (no data of the run) are logged all the same.
    const arrays = await startWorker(workers, arrayFlow, { connectionString: url });
    const engine = await failEach(sql, arrays.logs, "error_text_array", ["array"]);
    assert.equal(
      engine.failed.at(-1)!.fields.error,
      "array step error_text_array.list returned null, not an array",
    );
    await stopAll(workers.splice(0));

    // Asked for, the first line of an Error's message or a thrown string is logged (never a
    // thrown object).
    const loud = await startWorker(workers, flow, {
      connectionString: url,
      logErrorMessages: true,
    });
    const shown = await failEach(sql, loud.logs, "error_text", ["error", "nul", "object"]);
    assert.deepEqual(shown.failed.map((l) => [l.level, l.fields.errorKind, l.fields.error]), [
      ["error", "Error", "SMTP 550: mailbox c0@bounce.test unavailable"],
      ["error", "Error", "bad byte \uFFFD in c0@bounce.test"],
      ["error", "object Object", undefined],
    ]);
    assert.ok(!JSON.stringify(loud.logs).includes("s3cret"), "a thrown object is never logged");
  } finally {
    await stopAll(workers);
  }
});
