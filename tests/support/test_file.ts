/**
 * Runs one test file in a `deno test` process of its own, under a time bound, and checks that it
 * left nothing running. A file that overruns its bound is killed, with every process it started,
 * and fails naming the test that was still running: a hang is a failure, never a stuck run.
 *
 * A file's bound is {@link DEFAULT_TIMEOUT_S} seconds (`PGFLOW_TEST_TIMEOUT` sets another default);
 * a file that needs longer says so in a line of its own: `// pgflow-test-timeout: 600s`.
 *
 * @module
 */
import { startWatchdog } from "../../src/cli/db/watchdog.ts";
import {
  describeProcesses,
  findProcesses,
  processStates,
  type ProcMatch,
  stopLeftovers,
} from "./processes.ts";
import { namedFailures } from "./summary.ts";

/** The bound of a file that names none, in seconds. */
// About twice the slowest file (2-3 min with the suite running two files at once on 2 cores), so a
// machine busy with a second run does not make a slow file look hung.
export const DEFAULT_TIMEOUT_S = 420;

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

const RESULT_LINE = /^( *)(.+?) \.\.\.(?: (ok|FAILED|ignored|cancelled)\b.*)?\s*$/;
const SLOW_NOTICE = / \.\.\.'.*' has been running for over \([^)]*\)\s*$/;
const LATE_RESULT = /^ (ok|FAILED|ignored|cancelled)\b/;

/**
 * The test (and step) that started and never reported a result in `deno test` output, e.g.
 * `"claims > the second batch"`; `undefined` when every started test ended.
 *
 * @example
 * ```ts
 * unfinishedTest("a ... ok (1ms)\nb ...\n  step ...\n"); // "b > step"
 * ```
 */
export function unfinishedTest(output: string): string | undefined {
  const open: { indent: number; name: string }[] = [];
  for (const raw of output.split("\n")) {
    // Past a minute, Deno appends a notice to the open line and prints that line's result on one
    // of its own, unindented.
    const line = raw.replace(SLOW_NOTICE, " ...");
    if (LATE_RESULT.test(line)) {
      open.pop();
      continue;
    }
    const m = RESULT_LINE.exec(line);
    if (!m) continue;
    const indent = m[1].length;
    while (open.length > 0 && open[open.length - 1].indent >= indent) open.pop();
    if (m[3] === undefined) open.push({ indent, name: m[2] });
  }
  return open.length > 0 ? open.map((o) => o.name).join(" > ") : undefined;
}

/** Totals counted from the per-test lines, for output that ended before its summary. */
function countResults(output: string): TestTotals {
  const totals = { passed: 0, failed: 0, ignored: 0 };
  for (const line of output.split("\n")) {
    const m = RESULT_LINE.exec(line);
    if (!m || m[1].length > 0) continue;
    if (m[3] === "ok") totals.passed++;
    else if (m[3] === "FAILED" || m[3] === "cancelled") totals.failed++;
    else if (m[3] === "ignored") totals.ignored++;
  }
  return totals;
}

/**
 * The bound of a test file in seconds: its `// pgflow-test-timeout: <n>s` line, else
 * `PGFLOW_TEST_TIMEOUT`, else {@link DEFAULT_TIMEOUT_S}.
 *
 * @example
 * ```ts
 * fileTimeoutSeconds("// pgflow-test-timeout: 600s\n"); // 600
 * ```
 */
export function fileTimeoutSeconds(source: string): number {
  const own = /^\/\/ pgflow-test-timeout: (\d+)s?\s*$/m.exec(source);
  if (own) return Number(own[1]);
  const env = Number(Deno.env.get("PGFLOW_TEST_TIMEOUT"));
  return Number.isFinite(env) && env > 0 ? env : DEFAULT_TIMEOUT_S;
}

/** Options of {@link runTestFile}. */
export interface TestFileRunOptions {
  /** Arguments of `deno test` before the file (e.g. `--filter x`). */
  readonly flags: readonly string[];
  /** Environment added to the file's process. */
  readonly env: Record<string, string>;
  /** The run's folder: the file gets a temporary folder of its own inside it. */
  readonly runDir: string;
  /** The bound in seconds; default {@link fileTimeoutSeconds} of the file. */
  readonly timeoutSeconds?: number;
  /** Write the output to the terminal as it comes (else it is only returned). */
  readonly live?: boolean;
  /** Called with the file's process group once it runs, and with `undefined` when it ended. */
  readonly onGroup?: (pgid: number | undefined) => void;
  /** How long processes may take to end after the file's process did; default 5000 ms. */
  readonly graceMs?: number;
}

/** How one file's run ended. */
export interface TestFileResult extends TestTotals {
  readonly file: string;
  /** Everything the file wrote, stdout and stderr as they came. */
  readonly output: string;
  readonly durationMs: number;
  /** The bound it overran; `undefined` when it ended within it. */
  readonly timedOutAfterS?: number;
  /** Lines saying what went wrong besides failed tests: a hang, processes left running. */
  readonly problems: string[];
  /** One `file › test` (or `file › what else failed`) per failure counted in `failed`. */
  readonly failures: string[];
}

/**
 * Runs `file` in `deno test` (without a second type check: the runner checked every file once),
 * kills it and every process it started once it overruns its bound, and reports anything it left
 * running: processes still there after it ended, and servers its watchdogs had to stop.
 *
 * @example
 * ```ts
 * const result = await runTestFile("tests/pgmq/send_test.ts", { flags: [], env: {}, runDir: "/tmp/run" });
 * ```
 */
export async function runTestFile(
  file: string,
  options: TestFileRunOptions,
): Promise<TestFileResult> {
  const started = Date.now();
  const timeoutS = options.timeoutSeconds ?? fileTimeoutSeconds(await Deno.readTextFile(file));
  // The file's own temporary folder: every folder it makes (servers' data, PgBouncers) is inside,
  // so a server it left is found by the folder its command line names.
  // Short: a Unix socket's path (Chromium's profile lock) inside it must stay under 108 bytes.
  const dir = await Deno.makeTempDir({ dir: options.runDir });
  await Deno.chmod(dir, 0o1777);
  const notes = `${dir}.watchdog.log`;
  const child = new Deno.Command(Deno.execPath(), {
    args: ["test", "-A", "--no-check", ...options.flags, file],
    env: {
      NO_COLOR: "1",
      ...options.env,
      TMPDIR: dir,
      PGFLOW_TEST_RUN: dir,
      PGFLOW_WATCHDOG_LOG: notes,
    },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    // A process group of its own: the bound kills the file with everything it started, and a
    // Ctrl-C reaches the runner only, which then stops the files itself.
    detached: true,
  }).spawn();
  // Should the runner itself die, the file's processes go with it.
  const watchdog = startWatchdog({
    what: `the test processes of ${file}`,
    dir,
    stop: ["kill", "-KILL", `-${child.pid}`],
  });
  options.onGroup?.(child.pid);
  const chunks: string[] = [];
  const readers = [child.stdout, child.stderr].map((s) => s.getReader());
  const pumps = readers.map(async (reader) => {
    const decoder = new TextDecoder();
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        chunks.push(decoder.decode(value, { stream: true }));
        if (options.live) await Deno.stdout.write(value);
      }
    } catch {
      // Cancelled below.
    }
  });
  // What the file's processes were doing when it was killed: a hang's kind (a lock, a pipe, a
  // busy loop) shows in their states; the file's output alone cannot say.
  let states = "";
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    states = processStates(findProcesses({ pgids: [child.pid] }));
    killGroup(child.pid);
  }, timeoutS * 1000);
  const status = await child.status;
  clearTimeout(timer);
  // A process the file left may hold its output open: read what came, then stop waiting.
  await Promise.race([Promise.all(pumps), new Promise((r) => setTimeout(r, 2000))]);
  await Promise.all(readers.map((r) => r.cancel().catch(() => {})));
  const output = chunks.join("");
  const problems: string[] = [];
  const totals = parseDenoTestSummary(output) ?? countResults(output);
  const failures = namedFailures(file, output, totals.failed);
  const tail = output.trimEnd().split("\n").slice(-20).join("\n  ");
  if (timedOut) {
    const test = unfinishedTest(output);
    failures.push(`${file} › ${test ?? "a test"} (still running after ${timeoutS} s: killed)`);
    problems.push(
      `TIMEOUT ${file}: ${
        test ? `"${test}"` : "a test"
      } was still running after ${timeoutS} s; the file and every process it started were ` +
        "killed (a hang; or, if the file is only slow, give it a `// pgflow-test-timeout: <n>s` " +
        `line). Its processes then:\n${states}\n  output (last lines):\n  ${tail}`,
    );
    totals.failed++;
  } else if (status.signal) {
    // Killed from outside (the run was interrupted), or crashed.
    problems.push(`KILLED ${file}: ${status.signal} ended it before it finished`);
    failures.push(`${file} › (killed by ${status.signal} before it finished)`);
    totals.failed++;
  } else if (!status.success && totals.failed === 0) {
    // An error before any test ran still counts as a failure.
    problems.push(`${file}: deno test exited with code ${status.code} and no failed test`);
    failures.push(`${file} › (deno test exited with code ${status.code})`);
    totals.failed++;
  }
  const ours: ProcMatch = {
    pgids: [child.pid],
    envPrefix: `PGFLOW_TEST_RUN=${dir}`,
    commandIncludes: dir,
  };
  const left = await stopLeftovers(ours, { graceMs: options.graceMs });
  options.onGroup?.(undefined);
  const stopped = (await Deno.readTextFile(notes).catch(() => "")).trim();
  if (left.length > 0 || stopped) {
    problems.push(
      `LEFT RUNNING ${file}: when it ended, it had not stopped every process it started (now ` +
        "stopped):" + (left.length > 0 ? `\n${describeProcesses(left)}` : "") +
        (stopped ? `\n  ${stopped.split("\n").join("\n  ")}` : ""),
    );
    // A killed file could not stop what it started: that is the kill's failure, counted above.
    if (!timedOut && !status.signal) {
      failures.push(`${file} › (left processes running)`);
      totals.failed++;
    }
  }
  await watchdog.release();
  await Deno.remove(dir, { recursive: true }).catch(() => {});
  await Deno.remove(notes).catch(() => {});
  return {
    file,
    ...totals,
    output,
    durationMs: Date.now() - started,
    timedOutAfterS: timedOut ? timeoutS : undefined,
    problems,
    failures,
  };
}

/**
 * Kills a process group at once.
 *
 * @example
 * ```ts
 * killGroup(child.pid); // a child spawned with `detached: true`
 * ```
 */
export function killGroup(pgid: number): void {
  try {
    Deno.kill(-pgid, "SIGKILL");
  } catch {
    // The group is gone.
  }
}
