/**
 * The end of a run's output: one line per failure (`file › test`), then the `N passed, N failed`
 * line CI reads, so a failing run says what failed where it is seen rather than somewhere in
 * thousands of lines above.
 *
 * @module
 */

/** How a run ended, as its last lines tell it. */
export interface RunSummary {
  readonly passed: number;
  readonly failed: number;
  readonly ignored: number;
  /** One entry per failure counted in `failed`: `file › test`, or what else failed. */
  readonly failures: readonly string[];
  /** The signal that stopped the run early, if one did. */
  readonly interrupted?: Deno.Signal;
}

const FAILURE = / => \.?\/?[^ ]+:\d+:\d+$/;

/**
 * The tests `deno test` output names as failed: its closing `FAILURES` list (`name =>
 * ./file:line:col`, a step as `test > step`, or `./file (uncaught error)`), else, for output cut
 * short before it, the top-level tests whose line ended `FAILED` or `cancelled`.
 *
 * @example
 * ```ts
 * failedTestNames(" FAILURES \n\nsends => ./a_test.ts:3:6\n\nFAILED | 0 passed | 1 failed\n");
 * // ["sends"]
 * ```
 */
export function failedTestNames(output: string): string[] {
  const lines = output.split("\n");
  const header = lines.findLastIndex((l) => l.trim() === "FAILURES");
  if (header >= 0) {
    const names: string[] = [];
    let i = header + 1;
    while (i < lines.length && lines[i].trim() === "") i++;
    for (; i < lines.length && lines[i].trim() !== ""; i++) {
      // A step is listed as `test ... step`; the runner names it `test > step` elsewhere too.
      names.push(lines[i].replace(FAILURE, "").trim().replaceAll(" ... ", " > "));
    }
    return names;
  }
  return lines.flatMap((l) => {
    const m = /^(\S.*?) \.\.\. (FAILED|cancelled)\b/.exec(l);
    return m ? [m[1]] : [];
  });
}

/**
 * `file › name` for each failed test of `file`'s output, padded to `count` entries with one that
 * says how many more failed unnamed, so the list never claims fewer failures than the count.
 *
 * @example
 * ```ts
 * namedFailures("tests/pgmq/send_test.ts", output, 2); // ["tests/pgmq/send_test.ts › sends", "tests/pgmq/send_test.ts › …"]
 * ```
 */
export function namedFailures(file: string, output: string, count: number): string[] {
  const names = failedTestNames(output).slice(0, count).map((n) => `${file} › ${n}`);
  if (names.length < count) {
    names.push(`${file} › ${count - names.length} more failed test(s) (see its output above)`);
  }
  return names;
}

/**
 * The run's last lines: each failure, then `N passed, N failed` (with `, N skipped` and
 * ` (interrupted)` when so).
 *
 * @example
 * ```ts
 * console.log(summaryLines({ passed: 3, failed: 1, ignored: 0, failures: ["tests/pgmq/send_test.ts › sends"] }));
 * // FAILED tests/pgmq/send_test.ts › sends
 * // 3 passed, 1 failed
 * ```
 */
export function summaryLines(run: RunSummary): string {
  const total = `${run.passed} passed, ${run.failed} failed${
    run.ignored ? `, ${run.ignored} skipped` : ""
  }${run.interrupted ? " (interrupted)" : ""}`;
  return [...run.failures.map((f) => `FAILED ${f}`), total].join("\n");
}
