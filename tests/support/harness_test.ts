import assert from "node:assert/strict";
import { testDatabase, waitFor } from "./db.ts";
import { parseDenoTestSummary } from "./run_tests.ts";
import { failedTestNames, namedFailures, summaryLines } from "./summary.ts";

const db = testDatabase(import.meta.url);

db.test("each file gets its own database cloned from the template", async ({ sql, url }) => {
  const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
  assert.match(name, /^t_harness_test_[0-9a-f]{8}$/);
  assert.ok(url.endsWith(`/${name}`));
  const [{ present }] = await sql<{ present: boolean }[]>`
    select exists (select 1 from pg_namespace where nspname = 'pgmq') as present`;
  assert.equal(present, true);
});

db.test("extra connections see each other's committed work only", async ({ connect }) => {
  const a = connect();
  const b = connect();
  await a`create table if not exists seen (i int)`;
  await a.begin(async (tx) => {
    await tx`insert into seen values (1)`;
    const [{ n }] = await b<{ n: number }[]>`select count(*)::int as n from seen`;
    assert.equal(n, 0);
  });
  const [{ n }] = await b<{ n: number }[]>`select count(*)::int as n from seen`;
  assert.equal(n, 1);
});

Deno.test("waitFor returns the first truthy value and names what timed out", async () => {
  let calls = 0;
  assert.equal(await waitFor(() => ++calls >= 3 && calls, { intervalMs: 1 }), 3);
  await assert.rejects(
    () => waitFor(() => false, { timeoutMs: 20, intervalMs: 5, what: "the moon" }),
    /timed out after 20 ms waiting for the moon/,
  );
});

Deno.test("the runner reads deno test's summary line", () => {
  assert.deepEqual(
    parseDenoTestSummary("x\nok | 12 passed (3 steps) | 0 failed | 2 ignored (2s)\n"),
    {
      passed: 12,
      failed: 0,
      ignored: 2,
    },
  );
  assert.deepEqual(parseDenoTestSummary("FAILED | 4 passed | 1 failed (1s)"), {
    passed: 4,
    failed: 1,
    ignored: 0,
  });
  assert.equal(parseDenoTestSummary("error: Module not found"), undefined);
});

Deno.test("the runner names failed tests from output cut short, and never fewer than counted", () => {
  // Killed before deno's closing list: the top-level lines that ended FAILED or cancelled.
  const cut =
    "a ... ok (1ms)\nb ... FAILED (2ms)\nc ...\n  step ... cancelled (0ms)\nc ... cancelled\n";
  assert.deepEqual(failedTestNames(cut), ["b", "c"]);
  assert.deepEqual(namedFailures("tests/pgmq/read_test.ts", "error: Module not found\n", 2), [
    "tests/pgmq/read_test.ts › 2 more failed test(s) (see its output above)",
  ]);
  assert.equal(
    summaryLines({
      passed: 5,
      failed: 1,
      ignored: 2,
      failures: ["[ci] lint (see its output above)"],
    }),
    "FAILED [ci] lint (see its output above)\n5 passed, 1 failed, 2 skipped",
  );
  assert.equal(
    summaryLines({ passed: 5, failed: 0, ignored: 0, failures: [] }),
    "5 passed, 0 failed",
  );
});
