/**
 * A watchdog for a throw-away server: a tiny `sh` process, in a session of its own, that holds a
 * pipe from the process that started the server. However that process ends (SIGKILL included) the
 * pipe closes, and the watchdog stops the server and removes its folder; a clean stop releases it.
 * Linux's parent-death signal is out of Deno's reach, and a pipe's end is the one notice no way of
 * dying can skip.
 *
 * @module
 */

/**
 * What to stop when the starter ends without releasing the watchdog.
 *
 * @example
 * ```ts
 * import type { WatchdogOptions } from "./watchdog.ts";
 *
 * const options: WatchdogOptions = { what: "a throw-away PgBouncer", dir: "/tmp/pgflow-pgbouncer-x" };
 * ```
 */
export interface WatchdogOptions {
  /** Names the server in the watchdog's note, e.g. `the throw-away Postgres in /tmp/x`. */
  readonly what: string;
  /**
   * The server's folder: removed at the end, and every process whose command line names it (the
   * server, or an `initdb` or `pg_ctl` still running for the dead starter) is stopped first.
   */
  readonly dir: string;
  /** A command (argv) that stops the server properly, tried before anything is killed. */
  readonly stop?: readonly string[];
}

/**
 * A running watchdog.
 *
 * @example
 * ```ts
 * import { startWatchdog } from "./watchdog.ts";
 *
 * const dir = await Deno.makeTempDir();
 * const watchdog = startWatchdog({ what: `a server in ${dir}`, dir });
 * await watchdog.release(); // the starter stopped the server itself
 * ```
 */
export interface Watchdog {
  /** The watchdog's pid. */
  readonly pid: number;
  /** Tells the watchdog the server was stopped properly: it exits and does nothing. */
  release(): Promise<void>;
}

// Runs in its own session (a Ctrl-C or a kill of the starter's process group does not reach it)
// and ignores the usual termination signals. Processes naming the folder are found in /proc, which
// every Linux has (pgrep is not always installed), by one grep over every command line: a process
// per /proc entry took seconds on a busy machine with hundreds of processes, and the stop waited
// for it. The folder reaches grep on its standard input and the script's own text names only the
// variable, so the scan never finds itself or the watchdog.
const SCRIPT = `
trap '' INT TERM HUP QUIT PIPE
while IFS= read -r line; do
  [ "$line" = release ] && exit 0
done
note="[watchdog] process $WATCHDOG_STARTER ended without stopping $WATCHDOG_WHAT: stopped it"
users() {
  printf '%s\\n' "$WATCHDOG_DIR" | grep -lFf - /proc/[0-9]*/cmdline 2>/dev/null |
    while IFS= read -r f; do f=\${f#/proc/}; echo "\${f%/cmdline}"; done
}
i=0
while :; do
  [ -n "$WATCHDOG_STOP" ] && sh -c "$WATCHDOG_STOP" >/dev/null 2>&1 </dev/null
  left=$(users)
  [ -z "$left" ] && break
  [ $i -ge 40 ] && break
  # A proper stop gets two seconds (a server may still be starting for the dead starter).
  if [ -z "$WATCHDOG_STOP" ] || [ $i -ge 4 ]; then kill -KILL $left 2>/dev/null; fi
  i=$((i+1))
  sleep 0.5
done
rm -rf -- "$WATCHDOG_DIR"
echo "$note" >&2
[ -n "$PGFLOW_WATCHDOG_LOG" ] && echo "$note" >> "$PGFLOW_WATCHDOG_LOG"
exit 0
`;

/**
 * The name a watchdog runs under (its `$0`): its command line ends with it, which is how a test
 * run tells a watchdog still doing its stop from a process left running.
 *
 * @example
 * ```ts
 * import { WATCHDOG_NAME } from "./watchdog.ts";
 *
 * const isWatchdog = (command: string) => command.endsWith(` ${WATCHDOG_NAME}`);
 * ```
 */
export const WATCHDOG_NAME = "pgflow-watchdog";

/** Quotes `arg` for `sh`. */
function shellQuote(arg: string): string {
  return `'${arg.replaceAll("'", `'\\''`)}'`;
}

/**
 * Starts a watchdog for a server this process is about to start. Call it before the server
 * exists, so no moment is left in which the starter can die unwatched; `release` once the server
 * is stopped and its folder removed.
 *
 * @example
 * ```ts
 * import { startWatchdog } from "./watchdog.ts";
 *
 * const dir = await Deno.makeTempDir({ prefix: "pgflow-pg-" });
 * const watchdog = startWatchdog({
 *   what: `the throw-away Postgres in ${dir}`,
 *   dir,
 *   stop: ["pg_ctl", "-D", `${dir}/data`, "-m", "immediate", "-w", "stop"],
 * });
 * // ... start the server, use it, stop it, remove dir ...
 * await watchdog.release();
 * ```
 */
export function startWatchdog(options: WatchdogOptions): Watchdog {
  const child = new Deno.Command("sh", {
    args: ["-c", SCRIPT, WATCHDOG_NAME],
    env: {
      WATCHDOG_STARTER: String(Deno.pid),
      WATCHDOG_WHAT: options.what,
      WATCHDOG_DIR: options.dir,
      WATCHDOG_STOP: options.stop ? options.stop.map(shellQuote).join(" ") : "",
    },
    stdin: "piped",
    stdout: "null",
    stderr: "inherit",
    detached: true,
  }).spawn();
  // The watchdog lives as long as the server, which must not keep this process alive.
  child.unref();
  const writer = child.stdin.getWriter();
  let released: Promise<void> | undefined;
  return {
    pid: child.pid,
    release: () =>
      released ??= (async () => {
        try {
          await writer.write(new TextEncoder().encode("release\n"));
          await writer.close();
        } catch {
          // The watchdog is already gone.
        }
        child.ref();
        await child.status;
      })(),
  };
}
