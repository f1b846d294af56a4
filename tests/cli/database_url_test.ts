/**
 * Every command that opens a database (migrate, status, coverage, dashboard), given a malformed
 * URL by flag or environment: within a second, one line on stderr naming where the URL came from
 * and the part that is wrong, exit code 2 (usage), no stack trace, and the password nowhere.
 */
import assert from "node:assert/strict";
import { main } from "../../src/cli/main.ts";
import { BAD_URLS, SECRET } from "../platform/bad_urls.ts";
import { runCli, shown } from "./helpers.ts";

const COMMANDS = ["migrate", "status", "coverage", "dashboard"];

/** Runs `main` in this process with console output captured. */
async function inProcess(argv: string[]): Promise<{ code: number; out: string; ms: number }> {
  const original = { error: console.error, log: console.log };
  let out = "";
  console.error = console.log = (...parts: unknown[]) => (out += `${parts.join(" ")}\n`);
  const started = performance.now();
  try {
    const code = await main(argv);
    return { code, out, ms: performance.now() - started };
  } finally {
    Object.assign(console, original);
  }
}

Deno.test("each command answers each malformed --database-url within a second", async () => {
  for (const command of COMMANDS) {
    for (const bad of BAD_URLS) {
      const { code, out, ms } = await inProcess([command, "--database-url", bad.url]);
      const what = `pgflow ${command}, ${bad.kind} (${ms.toFixed(0)} ms):\n${out}`;
      assert.equal(code, 2, what);
      assert.match(out, /^pgflow: error: --database-url [^\n]*\n$/, `one line: ${what}`);
      assert.match(out, bad.says, what);
      assert.doesNotMatch(out, SECRET, what);
      assert.ok(ms < 1000, `within a second: ${what}`);
    }
  }
});

Deno.test("as a process: one line on stderr, exit 2, no stack, no password", async () => {
  const runs: [string[], Record<string, string>, string, string][] = [];
  for (const bad of BAD_URLS) {
    for (const command of COMMANDS) {
      runs.push([[command, "--database-url", bad.url], {}, "--database-url", bad.kind]);
    }
    runs.push([["migrate"], { DATABASE_URL: bad.url }, "DATABASE_URL", bad.kind]);
    runs.push([["status"], { EDGE_WORKER_DB_URL: bad.url }, "EDGE_WORKER_DB_URL", bad.kind]);
  }
  // A few processes at a time: the machine is small.
  for (let i = 0; i < runs.length; i += 4) {
    await Promise.all(
      runs.slice(i, i + 4).map(async ([args, env, source, kind]) => {
        const started = performance.now();
        const run = await runCli(args, { env });
        const seconds = (performance.now() - started) / 1000;
        const what = `pgflow ${args[0]} with ${source}: ${kind} (${seconds.toFixed(1)} s)\n${
          shown(run)
        }`;
        const bad = BAD_URLS.find((b) => b.kind === kind)!;
        assert.equal(run.code, 2, what);
        assert.equal(run.stdout, "", what);
        assert.match(run.stderr, new RegExp(`^pgflow: error: ${source} [^\\n]*\\n$`), what);
        assert.match(run.stderr, bad.says, what);
        assert.doesNotMatch(run.stdout + run.stderr, SECRET, what);
        assert.doesNotMatch(run.stderr, /unexpected error| {4}at |\.ts:\d+:\d+/, what);
        // Deno's own start-up is in this, four at once on a machine that may be busy: only a
        // hang or a retry loop takes a minute (the answer itself is immediate: the test above).
        assert.ok(seconds < 60, what);
      }),
    );
  }
});
