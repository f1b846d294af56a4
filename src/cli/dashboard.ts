/**
 * `pgflow dashboard [--port N] [--host H] [--allow-host NAME] [--allow-actions] [--database-url URL]`:
 * serves a live web page of a database's queues, coverage, workers, runs (searchable), failures,
 * stuck tasks and one run's DAG, attempts and waits, until Ctrl-C; read-only unless
 * `--allow-actions`.
 *
 * @module
 */
import { parseArgs } from "./args.ts";
import { databaseUrl, openDatabase, redact } from "./connect.ts";
import { parseHost, showHost } from "./dashboard/hosts.ts";
import { startDashboard } from "./dashboard/server.ts";
import { CliError, progress, result, UsageError } from "./output.ts";

/** The help text of `pgflow dashboard`. */
export const DASHBOARD_HELP =
  `pgflow dashboard [--port N] [--host H] [--allow-host NAME]... [--database-url URL]
                 [--stale-after SECONDS] [--stuck-after SECONDS] [--allow-actions]

Serves a web page that refreshes itself every 2 s: queues (depth, oldest message, live workers,
coverage, a depth sparkline), live workers, runs by flow, a run search (flow, status, id prefix),
recent failures with their error, stuck tasks, and one run (click it): its steps as a graph, why
each unfinished step waits, and every attempt with its worker, times, outcome, error and stack.
Every read runs in a read-only transaction. It has no login: anyone who can reach the port sees
runs, errors and step outputs, so keep the default 127.0.0.1 or put it behind something that
authenticates.

  --port N               the port; default 8765 (0: any free port)
  --host H               the address to bind; default 127.0.0.1 (0.0.0.0: every interface)
  --allow-host NAME      also answer requests addressed to NAME (at the dashboard's port) or
                         NAME:PORT (e.g. behind a proxy or a port mapping); repeatable
  --database-url URL     the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --stale-after SECONDS  a worker is live if it sent a heartbeat this recently; default 30
  --stuck-after SECONDS  a queued task waiting longer than this is listed as stuck; default 60
  --allow-actions        also offer Cancel, Retry and Resume on a run (each confirmed in the page;
                         pgflow.cancel_run, retry_run, resume_run). Without it the dashboard
                         cannot change anything. Actions accept only same-origin requests that
                         carry the page's per-process token.

It answers only requests whose Host header names it, so that a web page elsewhere cannot point its
own name at this address (DNS rebinding) and read the dashboard through your browser. Accepted,
at the dashboard's port (or with no port): the --host address itself; localhost, 127.0.0.1 and
[::1] when bound to a loopback address or to 0.0.0.0 / ::; this machine's own IP addresses when
bound to 0.0.0.0 / ::; and every --allow-host. Any other Host is answered 421.

Prints the page's URL on stdout, then serves until Ctrl-C (exit 0). Exit codes: 1 the database or
the port cannot be used, 2 usage error.`;

/**
 * Runs `pgflow dashboard` until SIGINT or SIGTERM; returns the exit code.
 *
 * @example
 * ```ts
 * import { dashboard } from "./dashboard.ts";
 *
 * // Deno.exit(await dashboard(["--port", "0"]));
 * ```
 */
export async function dashboard(argv: readonly string[]): Promise<number> {
  const args = parseArgs(
    argv,
    {
      "database-url": "string",
      "port": "string",
      "host": "string",
      "allow-host": "list",
      "stale-after": "string",
      "stuck-after": "string",
      "allow-actions": "boolean",
    },
    "pgflow dashboard",
  );
  if (args.help) {
    result(DASHBOARD_HELP);
    return 0;
  }
  const port = wholeNumber(args.strings.port ?? "8765", "--port", 0, 65_535);
  const staleAfter = wholeNumber(args.strings["stale-after"] ?? "30", "--stale-after", 1, 86_400);
  const stuckAfter = wholeNumber(args.strings["stuck-after"] ?? "60", "--stuck-after", 1, 86_400);
  const hostname = bindAddress(args.strings.host ?? "127.0.0.1");
  const allowHosts = (args.lists["allow-host"] ?? []).map(allowHost);
  const allowActions = args.booleans.has("allow-actions");
  const { url } = databaseUrl(args.strings["database-url"], "pgflow dashboard");
  const sql = await openDatabase(url);
  try {
    let served;
    try {
      served = startDashboard(sql, {
        hostname,
        port,
        allowHosts,
        staleAfterSeconds: staleAfter,
        queuedAfterSeconds: stuckAfter,
        allowActions,
      });
    } catch (error) {
      throw new CliError(listenProblem(error, hostname, port));
    }
    const stop = () => served.shutdown();
    const signals: Deno.Signal[] = [];
    for (const s of ["SIGINT", "SIGTERM"] as const) {
      try {
        Deno.addSignalListener(s, stop);
        signals.push(s);
      } catch { /* not a signal of this platform (SIGTERM on Windows) */ }
    }
    try {
      progress(
        allowActions
          ? `dashboard of ${
            redact(url)
          } (actions allowed: cancel, retry, resume; no login); Ctrl-C to stop`
          : `dashboard of ${redact(url)} (read-only, no login); Ctrl-C to stop`,
      );
      if (hostname !== "127.0.0.1" && hostname !== "localhost" && hostname !== "::1") {
        progress(
          `listening on ${hostname}: anyone who can reach it sees runs and outputs` +
            (allowActions ? ", and can cancel, retry and resume runs" : ""),
        );
        progress(
          `answering Host ${
            served.allowedHosts.map(showHost).join(", ")
          } only; add names with --allow-host`,
        );
      }
      result(served.url);
      await served.finished;
    } finally {
      for (const s of signals) Deno.removeSignalListener(s, stop);
    }
    return 0;
  } finally {
    await sql.end({ timeout: 5 });
  }
}

function wholeNumber(text: string, flag: string, min: number, max: number): number {
  const n = Number(text);
  if (!/^\d+$/.test(text) || n < min || n > max) {
    throw new UsageError(
      `${flag} must be a whole number from ${min} to ${max}, got ${JSON.stringify(text)}`,
    );
  }
  return n;
}

/** `--host`: an address or host name to bind, without a port (IPv6 bare, for Deno.serve). */
function bindAddress(text: string): string {
  const parsed = parseHost(text);
  if (parsed !== undefined && parsed.port === undefined) {
    return parsed.host.replace(/^\[(.*)\]$/, "$1");
  }
  const fix = parsed !== undefined ? "; give the port with --port" : "";
  throw new UsageError(
    `--host must be an IP address or host name without a port (e.g. 127.0.0.1, 0.0.0.0, ::1), got ${
      JSON.stringify(text)
    }${fix}`,
  );
}

/** One `--allow-host`: `NAME` or `NAME:PORT`. */
function allowHost(text: string): string {
  if (parseHost(text) !== undefined) return text;
  throw new UsageError(
    `--allow-host must be a host name or IP address, optionally with :PORT (e.g. dash.example.com, ` +
      `10.0.0.5:8765, [fd00::5]), got ${JSON.stringify(text)}`,
  );
}

function listenProblem(error: unknown, hostname: string, port: number): string {
  if (error instanceof Deno.errors.AddrInUse) {
    return `port ${port} on ${hostname} is in use; pass another --port (or --port 0 for any free one)`;
  }
  if (error instanceof Deno.errors.AddrNotAvailable) {
    return `cannot bind ${hostname}: not an address of this machine; pass --host 127.0.0.1`;
  }
  if (error instanceof Deno.errors.PermissionDenied) {
    return `not allowed to listen on ${hostname}:${port}; pick a port above 1023`;
  }
  return `cannot listen on ${hostname}:${port}: ${
    (error as Error).message
  }; check --host and --port`;
}
