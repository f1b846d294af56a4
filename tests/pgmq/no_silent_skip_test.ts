/**
 * A PGMQ conformance test that does not apply to the run's PGMQ (an extension before 1.5, the
 * compatible SQL, an extension without the create lock) is marked `ignore:` with a flag naming the
 * reason (helpers.ts), so the run reports it skipped; none passes by returning early.
 */
import assert from "node:assert/strict";

Deno.test("no PGMQ test returns early instead of being marked ignored", () => {
  const early: string[] = [];
  let files = 0;
  for (const entry of Deno.readDirSync(new URL(".", import.meta.url))) {
    if (!entry.name.endsWith("_test.ts")) continue;
    files++;
    const lines = Deno.readTextFileSync(new URL(entry.name, import.meta.url)).split("\n");
    lines.forEach((line, i) => {
      // A test body's early exit: `if (...) return;` at the body's own indentation.
      if (/^ {2,4}if \(.*\) return;/.test(line)) {
        early.push(`${entry.name}:${i + 1}: ${line.trim()}`);
      }
    });
  }
  assert.ok(files >= 9, `read ${files} test files`);
  assert.deepEqual(early, [], "mark the test { ignore: <flag> } instead (tests/pgmq/helpers.ts)");
});
