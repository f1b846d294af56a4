/**
 * `deno task test [deno test args]`: provisions the programs some tests need (PgBouncer, Chromium:
 * installed from Debian when missing and run as root, else named with their install command),
 * opens the run's database server, builds the templates, type-checks the test files once, runs
 * each file in a `deno test` process of its own under a time bound (`test_file.ts`), as many at
 * once as `deno test --parallel` would, and ends with the line `N passed, N failed`.
 *
 * Nothing it started outlives it: a file that overruns its bound is killed with every process it
 * started and fails naming the test that hung; a file that leaves a process or server running
 * fails naming it; on Ctrl-C or SIGTERM the running files are killed; after the suite no process
 * of the run may be left (the run fails naming any); and should the runner itself be killed,
 * watchdogs stop what it started.
 *
 * @module
 */
import { provision } from "../../local/provision.ts";
import { startWatchdog } from "../../src/cli/db/watchdog.ts";
import { openTestServer } from "./test_server.ts";
import { dropTestDatabases, prepareTemplates } from "./templates.ts";
import { describeProcesses, stopLeftovers } from "./processes.ts";
import { summaryLines } from "./summary.ts";
import {
  killGroup,
  parseDenoTestSummary,
  runTestFile,
  type TestFileResult,
  type TestTotals,
} from "./test_file.ts";

export { parseDenoTestSummary, type TestTotals };

/** How a run ended. */
export interface RunTotals extends TestTotals {
  /** The signal that stopped the run early, if one did. */
  interrupted?: Deno.Signal;
  /** One entry per failure counted in `failed` (`file › test`), by file. */
  failures: string[];
}

// `deno test` options whose value is the next argument.
const VALUED = new Set(["--filter", "--seed", "--reporter", "--junit-path", "--location"]);
const TEST_FILE = /(^|[._])test\.(ts|tsx|mts|js|mjs|jsx)$/;

/**
 * Splits `deno test` arguments into options and paths (default `tests/`); `--parallel` is dropped,
 * since the runner runs the files side by side itself.
 *
 * @example
 * ```ts
 * splitArgs(["tests/pgmq/", "--filter", "send"]); // { flags: ["--filter", "send"], paths: ["tests/pgmq/"] }
 * ```
 */
export function splitArgs(args: readonly string[]): { flags: string[]; paths: string[] } {
  const flags: string[] = [];
  const paths: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    if (arg === "--parallel") continue;
    if (!arg.startsWith("-")) paths.push(arg);
    else if (VALUED.has(arg) && i + 1 < args.length) flags.push(arg, args[++i]);
    else flags.push(arg);
  }
  return { flags, paths: paths.length > 0 ? paths : ["tests/"] };
}

/**
 * The test files under `paths` as `deno test` finds them (`*_test.ts`, `*.test.ts`, `test.ts` and
 * the other script extensions), sorted; a file named directly is taken as is.
 *
 * @example
 * ```ts
 * const files = testFiles(["tests/pgmq/"]);
 * ```
 */
export function testFiles(paths: readonly string[]): string[] {
  const found = new Set<string>();
  const walk = (dir: string) => {
    for (const entry of Deno.readDirSync(dir)) {
      const path = `${dir.replace(/\/$/, "")}/${entry.name}`;
      if (entry.isDirectory && !entry.name.startsWith(".") && entry.name !== "node_modules") {
        walk(path);
      } else if (entry.isFile && TEST_FILE.test(entry.name)) found.add(path);
    }
  };
  for (const path of paths) {
    if (Deno.statSync(path).isDirectory) walk(path);
    else found.add(path);
  }
  return [...found].sort();
}

/** How many files run at once: `DENO_JOBS`, else the number of CPUs (as `deno test --parallel`). */
function jobs(): number {
  const n = Number(Deno.env.get("DENO_JOBS"));
  return Number.isInteger(n) && n > 0 ? n : navigator.hardwareConcurrency;
}

const SIGNALS: Deno.Signal[] = ["SIGINT", "SIGTERM", "SIGHUP"];
const EXIT_CODE: Partial<Record<Deno.Signal, number>> = { SIGHUP: 129, SIGINT: 130, SIGTERM: 143 };

/**
 * Runs the suite (or the given files) and returns the totals; output goes to the terminal.
 *
 * @example
 * ```ts
 * const totals = await runTests(["tests/pgmq/"]);
 * ```
 */
export async function runTests(args: string[]): Promise<RunTotals> {
  const { flags, paths } = splitArgs(args);
  const files = testFiles(paths);
  const totals: RunTotals = { passed: 0, failed: 0, ignored: 0, failures: [] };
  const groups = new Set<number>();
  const listeners = SIGNALS.map((sig) => {
    const listener = () => {
      if (totals.interrupted) return;
      totals.interrupted = sig;
      console.error(`\n[test] ${sig}: stopping the test files and every process they started`);
      for (const g of groups) killGroup(g);
    };
    Deno.addSignalListener(sig, listener);
    return [sig, listener] as const;
  });
  const runDir = await Deno.makeTempDir({ prefix: "pgflow-run-" });
  await Deno.chmod(runDir, 0o755);
  const watchdog = startWatchdog({ what: `the test run in ${runDir}`, dir: runDir });
  const problems: string[] = [];
  const results: TestFileResult[] = [];
  try {
    await provision();
    const server = await openTestServer();
    try {
      const source = await prepareTemplates(server.url);
      console.error(`[test] PGMQ: ${source}; server: ${server.local ? "local" : "DATABASE_URL"}`);
      if (!totals.interrupted && await typeCheck(paths, groups)) {
        const env = { PGFLOW_TEST_SERVER_URL: server.url, PGFLOW_TEST_PGMQ_SOURCE: source };
        const live = files.length === 1 || jobs() === 1;
        const queue = [...files];
        const worker = async () => {
          for (let file = queue.shift(); file && !totals.interrupted; file = queue.shift()) {
            let group: number | undefined;
            const result = await runTestFile(file, {
              flags,
              env,
              runDir,
              live,
              onGroup: (pgid) => {
                if (group !== undefined) groups.delete(group);
                group = pgid;
                if (pgid !== undefined) groups.add(pgid);
                // A signal that came while the file was starting.
                if (pgid !== undefined && totals.interrupted) killGroup(pgid);
              },
            });
            results.push(result);
            if (!live) await Deno.stdout.write(new TextEncoder().encode(result.output));
            // In live mode the file's last line may still be open ("name ...").
            for (const p of result.problems) console.log(`${live ? "\n" : ""}${p}`);
            problems.push(...result.problems);
          }
        };
        await Promise.all(Array.from({ length: Math.min(jobs(), files.length) }, worker));
      } else if (!totals.interrupted) {
        problems.push("the test files do not type-check (see above)");
        totals.failures.push("the test files do not type-check (see above)");
        totals.failed++;
      }
      await dropTestDatabases(server.url).catch(() => {});
    } finally {
      await server.close();
    }
  } finally {
    for (const r of [...results].sort((a, b) => a.file.localeCompare(b.file))) {
      totals.passed += r.passed;
      totals.failed += r.failed;
      totals.ignored += r.ignored;
      totals.failures.push(...r.failures);
    }
    const left = await stopLeftovers({
      envPrefix: `PGFLOW_TEST_RUN=${runDir}/`,
      commandIncludes: runDir,
    });
    if (left.length > 0) {
      problems.push(
        `LEFT RUNNING after the suite (now stopped):\n${describeProcesses(left)}`,
      );
      totals.failures.push("processes left running after the suite (see above)");
      totals.failed++;
    }
    await Deno.remove(runDir, { recursive: true }).catch(() => {});
    await watchdog.release();
    for (const [sig, listener] of listeners) Deno.removeSignalListener(sig, listener);
    report(results, problems);
  }
  if (totals.interrupted) {
    totals.failures.push(`the run, stopped by ${totals.interrupted}`);
    totals.failed++;
  }
  return totals;
}

/** Type-checks every test file once (as `deno test` would), so each file then runs unchecked. */
async function typeCheck(paths: readonly string[], groups: Set<number>): Promise<boolean> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["test", "--no-run", "-A", ...paths],
    stdin: "null",
    stdout: "inherit",
    stderr: "inherit",
    detached: true,
  }).spawn();
  groups.add(child.pid);
  const { success } = await child.status;
  groups.delete(child.pid);
  return success;
}

/** The run's problems again at the end, where they are seen, and its slowest files. */
function report(results: readonly TestFileResult[], problems: readonly string[]): void {
  const slowest = [...results].sort((a, b) => b.durationMs - a.durationMs).slice(0, 5);
  if (slowest.length > 1) {
    console.error(
      `\n[test] slowest files: ${
        slowest.map((r) => `${r.file} ${(r.durationMs / 1000).toFixed(0)} s`).join(", ")
      }`,
    );
  }
  if (problems.length > 0) console.log(`\n${problems.join("\n")}`);
}

if (import.meta.main) {
  const t = await runTests(Deno.args);
  // Interrupted or not, the totals line stays as it was: `N passed, N failed`.
  console.log(summaryLines({ ...t, interrupted: undefined }));
  Deno.exit(t.interrupted ? EXIT_CODE[t.interrupted] ?? 1 : t.failed ? 1 : 0);
}
