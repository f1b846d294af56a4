/**
 * `deno task ci`: the README's test command. Format check, lint, type check, the full test suite and
 * a publish dry run; ends with `N passed, N failed` where every failed stage counts as a failure.
 *
 * @module
 */
import { runTests } from "./run_tests.ts";

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

const checks: [string, string[]][] = [
  ["fmt", ["fmt", "--check"]],
  ["lint", ["lint"]],
  ["check", ["task", "check"]],
  ["doc", ["doc", "--lint", "mod.ts"]],
];
let failedStages = 0;
for (const [name, args] of checks) if (!(await stage(name, args))) failedStages++;
const totals = await runTests([]);
if (totals.interrupted) {
  console.log(`${totals.passed} passed, ${totals.failed + failedStages} failed (interrupted)`);
  Deno.exit(1);
}
if (!(await stage("publish", ["publish", "--dry-run", "--allow-dirty"]))) failedStages++;
const failed = totals.failed + failedStages;
console.log(
  `${totals.passed} passed, ${failed} failed${totals.ignored ? `, ${totals.ignored} skipped` : ""}`,
);
Deno.exit(failed ? 1 : 0);
