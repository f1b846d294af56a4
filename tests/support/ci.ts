/**
 * `deno task ci`: the README's test command. Format check, lint, type check, the full test suite and
 * a publish dry run; ends with `N passed, N failed` where every failed stage counts as a failure.
 *
 * @module
 */
import { runTests } from "./run_tests.ts";
import { summaryLines } from "./summary.ts";

async function stage(name: string, args: string[]): Promise<boolean> {
  console.error(`\n[ci] ${name}: deno ${args.join(" ")}`);
  const { success } = await new Deno.Command(Deno.execPath(), {
    args,
    stdout: "inherit",
    stderr: "inherit",
  })
    .output();
  console.error(`[ci] ${name}: ${success ? "ok" : "FAILED"}`);
  return success;
}

// Every entry the package exports, linted together as JSR documents them: a type one entry keeps
// private (mod.ts's StepContext preset hides the DSL's) is public through another (dsl.ts).
const config = JSON.parse(await Deno.readTextFile("deno.json")) as {
  exports: Record<string, string>;
};
const entries = Object.values(config.exports);

const checks: [string, string[]][] = [
  ["fmt", ["fmt", "--check"]],
  ["lint", ["lint"]],
  ["check", ["task", "check"]],
  ["doc", ["doc", "--lint", ...entries]],
];
const failedStages: string[] = [];
for (const [name, args] of checks) if (!(await stage(name, args))) failedStages.push(name);
const totals = await runTests([]);
if (!totals.interrupted) {
  if (!(await stage("publish", ["publish", "--dry-run", "--allow-dirty"]))) {
    failedStages.push("publish");
  }
}
console.log(summaryLines({
  ...totals,
  failed: totals.failed + failedStages.length,
  failures: [
    ...failedStages.map((name) => `[ci] ${name} (see its output above)`),
    ...totals.failures,
  ],
}));
Deno.exit(totals.interrupted || totals.failed + failedStages.length > 0 ? 1 : 0);
