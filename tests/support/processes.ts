/**
 * Finds the processes a test run started, so the runner can check none is left when it ends: by
 * process group (a test file's `deno test` and its ordinary children), by an environment variable
 * they inherit, or by a folder their command line names (a Postgres that `pg_ctl` put in a session
 * of its own, a PgBouncer, a server started by a CLI run with a cleared environment). Linux only:
 * it reads `/proc`.
 *
 * @module
 */
import { WATCHDOG_NAME } from "../../src/cli/db/watchdog.ts";

/** A running process. */
export interface Proc {
  readonly pid: number;
  /** Its process group. */
  readonly pgid: number;
  /** Its command line, arguments joined by spaces. */
  readonly command: string;
  /**
   * A watchdog (`src/cli/db/watchdog.ts`) or a process one started (its scan, its stop command):
   * it ends on its own once its stop is done.
   */
  readonly watchdog: boolean;
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
  const all = new Map<number, { ppid: number; pgid: number; command: string }>();
  for (const entry of Deno.readDirSync("/proc")) {
    if (!/^\d+$/.test(entry.name)) continue;
    const pid = Number(entry.name);
    const stat = read(`/proc/${pid}/stat`);
    const cmdline = read(`/proc/${pid}/cmdline`);
    // A zombie has an empty command line: it is gone, only not yet reaped.
    if (stat === undefined || !cmdline) continue;
    // The command name (field 2) may hold spaces and parentheses: fields are read after its end.
    const [, ppid, pgid] = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
    all.set(pid, { ppid, pgid, command: cmdline.replaceAll("\0", " ").trim() });
  }
  const isWatchdog = (pid: number): boolean => {
    for (let p = all.get(pid), hops = 0; p !== undefined && hops < 64; hops++) {
      if (p.command.endsWith(` ${WATCHDOG_NAME}`)) return true;
      p = all.get(p.ppid);
    }
    return false;
  };
  const found: Proc[] = [];
  for (const [pid, { pgid, command }] of all) {
    if (pid === Deno.pid) continue;
    const ours = (match.pgids?.includes(pgid) ?? false) ||
      (match.commandIncludes !== undefined && command.includes(match.commandIncludes)) ||
      (match.envPrefix !== undefined &&
        (read(`/proc/${pid}/environ`) ?? "").split("\0").some((e) =>
          e.startsWith(match.envPrefix!)
        ));
    if (ours) found.push({ pid, pgid, command, watchdog: isWatchdog(pid) });
  }
  return found;
}

/** Options of {@link stopLeftovers}. */
export interface LeftoverOptions {
  /** How long the processes may take to end on their own; default 5000 ms. */
  readonly graceMs?: number;
  /**
   * How long watchdogs may then take to finish their stop; default 60000 ms. A watchdog gives up
   * after about 25 s of its own; a machine busy with other runs makes every step of it slower.
   */
  readonly watchdogMs?: number;
}

/**
 * Ends what a test run (or file) left running: waits up to `graceMs` for the matching processes to
 * end on their own, then stops those still there, except watchdogs, which are left to finish the
 * stop they are doing (a watchdog whose starter was among the stopped ones starts it then), for up
 * to `watchdogMs`; whatever is still there after that is stopped too. Returns what it stopped:
 * never a watchdog that finished in time, so a server its watchdog stopped shows in that
 * watchdog's note rather than as a process killed here.
 *
 * @example
 * ```ts
 * const left = await stopLeftovers({ pgids: [1234] });
 * if (left.length > 0) console.log(describeProcesses(left));
 * ```
 */
export async function stopLeftovers(
  match: ProcMatch,
  { graceMs = 5000, watchdogMs = 60_000 }: LeftoverOptions = {},
): Promise<Proc[]> {
  const left = await waitUntil(match, graceMs, () => false);
  const stopped = left.filter((p) => !p.watchdog);
  await stopProcesses(stopped);
  const overran = await waitUntil(match, watchdogMs, (procs) => procs.every((p) => !p.watchdog));
  await stopProcesses(overran);
  const seen = new Set(stopped.map((p) => p.pid));
  return [...stopped, ...overran.filter((p) => !seen.has(p.pid))];
}

/** Polls until no process matches, or `done` holds of those that do, or `ms` have passed. */
async function waitUntil(
  match: ProcMatch,
  ms: number,
  done: (procs: readonly Proc[]) => boolean,
): Promise<Proc[]> {
  const deadline = Date.now() + ms;
  for (;;) {
    const left = findProcesses(match);
    if (left.length === 0 || done(left) || Date.now() >= deadline) return left;
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Whether `pid` is running: neither gone nor a zombie (ended, not yet reaped by its parent, which
 * on a busy machine may take a while).
 *
 * @example
 * ```ts
 * isRunning(Deno.pid); // true
 * ```
 */
export function isRunning(pid: number): boolean {
  const stat = read(`/proc/${pid}/stat`);
  return stat !== undefined && stat[stat.lastIndexOf(")") + 2] !== "Z";
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

/**
 * One line per process with its scheduler state and where it sleeps in the kernel, for telling a
 * hang's kind apart (a process blocked on a lock, on a pipe, or busy), e.g.
 * `pid 42 S futex_wait_queue: deno test ...`.
 *
 * @example
 * ```ts
 * console.log(processStates(findProcesses({ pgids: [child.pid] })));
 * ```
 */
export function processStates(procs: readonly Proc[]): string {
  return procs.map((p) => {
    const stat = read(`/proc/${p.pid}/stat`) ?? "";
    const state = stat[stat.lastIndexOf(")") + 2] ?? "?";
    const wchan = (read(`/proc/${p.pid}/wchan`) ?? "").trim() || "-";
    const threads = (() => {
      try {
        return [...Deno.readDirSync(`/proc/${p.pid}/task`)].length;
      } catch {
        return 0;
      }
    })();
    return `  pid ${p.pid} ${state} ${wchan} (${threads} threads): ${p.command.slice(0, 200)}`;
  }).join("\n");
}
