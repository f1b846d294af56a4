/**
 * `deno task test [deno test args]`: provisions the programs some tests need (PgBouncer, Chromium:
 * installed from Debian when missing and run as root, else named with their install command),
 * opens the run's database server, builds the templates, runs `deno test` against them and ends
 * with the line `N passed, N failed`.
 *
 * @module
 */
import { provision } from "../../local/provision.ts";
import { openTestServer } from "./test_server.ts";
import { dropTestDatabases, prepareTemplates } from "./templates.ts";

/** Totals read from `deno test`'s summary line. */
export interface TestTotals {
  passed: number;
  failed: number;
  ignored: number;
}

/** Reads the totals from `deno test` output; `undefined` when it printed no summary. */
export function parseDenoTestSummary(output: string): TestTotals | undefined {
  // deno prints e.g. "ok | 12 passed (3 steps) | 0 failed | 1 ignored (2s)".
  const line = output.split("\n").reverse().find((l) => /\d+ passed.*\| \d+ failed/.test(l));
  if (!line) return undefined;
  const num = (re: RegExp) => Number(re.exec(line)?.[1] ?? 0);
  return {
    passed: num(/(\d+) passed/),
    failed: num(/(\d+) failed/),
    ignored: num(/(\d+) ignored/),
  };
}

/**
 * Runs the suite (or the given files) and returns the totals; output streams to the terminal.
 *
 * @example
 * ```ts
 * const totals = await runTests(["tests/pgmq/"]);
 * ```
 */
export async function runTests(args: string[]): Promise<TestTotals> {
  await provision();
  const server = await openTestServer();
  try {
    const source = await prepareTemplates(server.url);
    console.error(`[test] PGMQ: ${source}; server: ${server.local ? "local" : "DATABASE_URL"}`);
    const child = new Deno.Command(Deno.execPath(), {
      args: ["test", "-A", "--parallel", ...(args.length ? args : ["tests/"])],
      env: { PGFLOW_TEST_SERVER_URL: server.url, PGFLOW_TEST_PGMQ_SOURCE: source, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "inherit",
    }).spawn();
    let output = "";
    const decoder = new TextDecoder();
    for await (const chunk of child.stdout) {
      const text = decoder.decode(chunk, { stream: true });
      output += text;
      await Deno.stdout.write(chunk);
    }
    const status = await child.status;
    const totals = parseDenoTestSummary(output) ?? { passed: 0, failed: 0, ignored: 0 };
    // A crash or compile error before the summary still counts as a failure.
    if (!status.success && totals.failed === 0) totals.failed = 1;
    await dropTestDatabases(server.url).catch(() => {});
    return totals;
  } finally {
    await server.close();
  }
}

if (import.meta.main) {
  const t = await runTests(Deno.args);
  console.log(`${t.passed} passed, ${t.failed} failed${t.ignored ? `, ${t.ignored} skipped` : ""}`);
  Deno.exit(t.failed ? 1 : 0);
}
