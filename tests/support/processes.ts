/**
 * Finds the processes a test run started, so the runner can check none is left when it ends: by
 * process group (a test file's `deno test` and its ordinary children), by an environment variable
 * they inherit, or by a folder their command line names (a Postgres that `pg_ctl` put in a session
 * of its own, a PgBouncer, a server started by a CLI run with a cleared environment). Linux only:
 * it reads `/proc`.
 *
 * @module
 */

/** A running process. */
export interface Proc {
  readonly pid: number;
  /** Its process group. */
  readonly pgid: number;
  /** Its command line, arguments joined by spaces. */
  readonly command: string;
}

/** What makes a process one of ours; any one criterion is enough. */
export interface ProcMatch {
  /** Process groups. */
  readonly pgids?: readonly number[];
  /** A prefix of one of its environment entries, e.g. `PGFLOW_TEST_RUN=/tmp/run/`. */
  readonly envPrefix?: string;
  /** A text its command line contains, e.g. a folder. */
  readonly commandIncludes?: string;
}

function read(path: string): string | undefined {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return undefined;
  }
}

/**
 * The processes (other than this one) that match; a process that ends while it is read is left out.
 *
 * @example
 * ```ts
 * const left = findProcesses({ commandIncludes: "/tmp/pgflow-test-run-x" });
 * ```
 */
export function findProcesses(match: ProcMatch): Proc[] {
  const found: Proc[] = [];
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const pid = Number(entry.name);
    if (pid === Deno.pid) continue;
    const stat = read(`/proc/${pid}/stat`);
    const cmdline = read(`/proc/${pid}/cmdline`);
    // A zombie has an empty command line: it is gone, only not yet reaped.
    if (stat === undefined || !cmdline) continue;
    // The command name (field 2) may hold spaces and parentheses: fields are read after its end.
    const pgid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[2]);
    const command = cmdline.replaceAll("\0", " ").trim();
    const ours = (match.pgids?.includes(pgid) ?? false) ||
      (match.commandIncludes !== undefined && command.includes(match.commandIncludes)) ||
      (match.envPrefix !== undefined &&
        (read(`/proc/${pid}/environ`) ?? "").split("\0").some((e) =>
          e.startsWith(match.envPrefix!)
        ));
    if (ours) found.push({ pid, pgid, command });
  }
  return found;
}

/**
 * Waits up to `graceMs` for the matching processes to end on their own (a watchdog finishing its
 * stop), and returns those still running.
 *
 * @example
 * ```ts
 * const left = await lingering({ pgids: [1234] }, 5000);
 * ```
 */
export async function lingering(match: ProcMatch, graceMs: number): Promise<Proc[]> {
  const deadline = Date.now() + graceMs;
  for (;;) {
    const left = findProcesses(match);
    if (left.length === 0 || Date.now() >= deadline) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}

function signal(pid: number, sig: Deno.Signal): void {
  try {
    Deno.kill(pid, sig);
  } catch {
    // Already gone.
  }
}

/**
 * Stops processes: a postmaster with SIGQUIT (Postgres's immediate shutdown, which also ends its
 * backends), everything else with SIGKILL; whatever is still there after 3 s gets SIGKILL too.
 *
 * @example
 * ```ts
 * await stopProcesses(findProcesses({ pgids: [1234] }));
 * ```
 */
export async function stopProcesses(procs: readonly Proc[]): Promise<void> {
  if (procs.length === 0) return;
  for (const p of procs) signal(p.pid, /\/postgres -D /.test(p.command) ? "SIGQUIT" : "SIGKILL");
  const deadline = Date.now() + 3000;
  const alive = () => procs.filter((p) => read(`/proc/${p.pid}/cmdline`));
  while (alive().length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  for (const p of alive()) signal(p.pid, "SIGKILL");
}

/** One line per process, for a failure message. */
export function describeProcesses(procs: readonly Proc[]): string {
  return procs.map((p) => `  pid ${p.pid}: ${p.command.slice(0, 200)}`).join("\n");
}
