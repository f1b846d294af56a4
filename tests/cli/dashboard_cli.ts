/**
 * Starts `pgflow dashboard` as a user would (a `deno run` process, `--port 0`), waits for the URL
 * it prints, and stops it with SIGTERM.
 *
 * @module
 */

/** A running dashboard process. */
export interface DashboardProcess {
  /** The URL it printed on stdout. */
  readonly pageUrl: string;
  /** What it wrote to stderr so far. */
  stderr(): string;
  /** Sends SIGTERM and returns the exit code. */
  stop(): Promise<number>;
}

const ENTRY = new URL("../../src/cli/main.ts", import.meta.url).href;

/**
 * Runs `pgflow dashboard --port 0 <args>` (from `entry`, default this checkout's CLI).
 *
 * @example
 * ```ts
 * const dashboard = await startDashboardCli(["--database-url", url]);
 * try { await fetch(dashboard.pageUrl); } finally { await dashboard.stop(); }
 * ```
 */
export async function startDashboardCli(
  args: string[],
  entry: string = ENTRY,
): Promise<DashboardProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--no-lock", entry, "dashboard", "--port", "0", ...args],
    env: { NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderrText: string[] = [];
  const drained = (async () => {
    for await (const chunk of child.stderr.pipeThrough(new TextDecoderStream())) {
      stderrText.push(chunk);
    }
  })();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  while (!out.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) break;
    out += value;
  }
  // Keep reading stdout until the process ends, so it never blocks on a full pipe.
  const rest = (async () => {
    while (!(await reader.read()).done) { /* nothing else is expected */ }
  })();
  return {
    pageUrl: out.trim(),
    stderr: () => stderrText.join(""),
    async stop(): Promise<number> {
      try {
        child.kill("SIGTERM");
      } catch { /* already ended */ }
      const status = await child.status;
      await rest;
      await drained;
      return status.code;
    },
  };
}
