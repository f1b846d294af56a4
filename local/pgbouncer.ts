/**
 * Starts a throw-away PgBouncer in front of a Postgres server, for the tests and the benchmarks
 * that must run behind a real pooler (transaction mode stands in for Supabase's Supavisor on port
 * 6543; session mode for its session pooler on 5432). As root it runs as the `postgres` (or
 * `nobody`) user: PgBouncer refuses to run as root. Like the throw-away Postgres, it never outlives
 * the process that started it (a watchdog stops it when that process ends without `destroy`).
 *
 * @module
 */
import { startWatchdog } from "../src/cli/db/watchdog.ts";
import { notInstalled, PGBOUNCER } from "./provision.ts";

/** How PgBouncer hands server connections to clients. */
export type PoolMode = "transaction" | "session";

/** Options of {@link startPgBouncer}. */
export interface PgBouncerOptions {
  /** Host of the Postgres server; default `127.0.0.1`. */
  readonly serverHost?: string;
  /** Port of the Postgres server. */
  readonly serverPort: number;
  /** The user PgBouncer logs in to Postgres as; default `postgres` (trust auth). */
  readonly serverUser?: string;
  /** Default `transaction`. */
  readonly mode?: PoolMode;
  /** Server connections per (database, user); default 20 (PgBouncer's own default). */
  readonly poolSize?: number;
  /** Most client connections; default 400. */
  readonly maxClientConn?: number;
  /** Seconds a client may wait for a server connection before PgBouncer drops it; default 120. */
  readonly queryWaitTimeout?: number;
  /** Print progress lines to stderr. */
  readonly verbose?: boolean;
  /** The PgBouncer binary; default {@link findPgBouncer}'s. */
  readonly binary?: string;
}

/** A running PgBouncer. */
export interface LocalPgBouncer {
  /** The port clients connect to. */
  readonly port: number;
  /** The pool mode it runs in. */
  readonly mode: PoolMode;
  /** `url` with its host and port replaced by PgBouncer's (database, user and password kept). */
  via(url: string): string;
  /** PgBouncer's log so far. */
  log(): Promise<string>;
  /** Stops PgBouncer at once, dropping every connection; `start` brings it back. */
  stop(): Promise<void>;
  /** Starts a stopped PgBouncer again on the same port. */
  start(): Promise<void>;
  /** Stops it and deletes its folder. */
  destroy(): Promise<void>;
}

/** The PgBouncer binary: `PGFLOW_PGBOUNCER` when set, else a Debian or local install. */
export function findPgBouncer(): string | undefined {
  return PGBOUNCER.find();
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

async function runAsUser(): Promise<string | undefined> {
  if (Deno.uid() !== 0) return undefined;
  for (const name of ["postgres", "nobody"]) {
    const out = await new Deno.Command("id", { args: ["-u", name], stdout: "null", stderr: "null" })
      .output();
    if (out.success) return name;
  }
  throw new Error("running as root, but neither a 'postgres' nor a 'nobody' user exists");
}

async function accepts(port: number): Promise<boolean> {
  try {
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    conn.close();
    return true;
  } catch {
    return false;
  }
}

/**
 * Starts PgBouncer on a free loopback port and returns once it accepts connections. Every database
 * name is forwarded to the server (`* =` entry), so one PgBouncer serves every test database.
 *
 * @example
 * ```ts
 * const pg = await startLocalPostgres();
 * const bouncer = await startPgBouncer({ serverPort: pg.port, mode: "transaction" });
 * const url = bouncer.via(pg.url); // postgres://postgres@127.0.0.1:<bouncer port>/postgres
 * await bouncer.destroy();
 * ```
 */
export async function startPgBouncer(options: PgBouncerOptions): Promise<LocalPgBouncer> {
  const binary = options.binary ?? findPgBouncer();
  if (binary === undefined) {
    throw new Error(notInstalled(PGBOUNCER, "PGFLOW_PGBOUNCER"));
  }
  const mode = options.mode ?? "transaction";
  const user = await runAsUser();
  const dir = await Deno.makeTempDir({ prefix: "pgflow-pgbouncer-" });
  // PgBouncer's command line names its folder: that is how the watchdog finds it.
  const watchdog = startWatchdog({ what: `the throw-away PgBouncer in ${dir}`, dir });
  let port = freePort();
  const configFor = (port: number) =>
    [
      "[databases]",
      `* = host=${options.serverHost ?? "127.0.0.1"} port=${options.serverPort} user=${
        options.serverUser ?? "postgres"
      }`,
      "[pgbouncer]",
      "listen_addr = 127.0.0.1",
      `listen_port = ${port}`,
      // Any client user name is accepted and every server login uses the [databases] user: the
      // throw-away server trusts loopback, so there is no password to check.
      "auth_type = any",
      `pool_mode = ${mode}`,
      `default_pool_size = ${options.poolSize ?? 20}`,
      `max_client_conn = ${options.maxClientConn ?? 400}`,
      `query_wait_timeout = ${options.queryWaitTimeout ?? 120}`,
      `logfile = ${dir}/pgbouncer.log`,
      `pidfile = ${dir}/pgbouncer.pid`,
      "unix_socket_dir =",
      // Clients may send these startup parameters (postgres.js does not by default).
      "ignore_startup_parameters = extra_float_digits,options",
    ].join("\n") + "\n";
  const configure = async () => {
    await Deno.writeTextFile(`${dir}/pgbouncer.ini`, configFor(port));
    if (user) await new Deno.Command("chown", { args: ["-R", user, dir] }).output();
  };
  const say = (msg: string) => options.verbose && console.error(`[pgbouncer] ${msg}`);
  let child: Deno.ChildProcess | undefined;
  const readLog = () => Deno.readTextFile(`${dir}/pgbouncer.log`).catch(() => "");
  const start = async () => {
    if (child !== undefined) return;
    // `-u` makes PgBouncer drop root itself, so signals reach it directly.
    const args = user ? ["-u", user, `${dir}/pgbouncer.ini`] : [`${dir}/pgbouncer.ini`];
    const logFrom = (await readLog()).length;
    // PgBouncer writes its log to the file as well; the file is what `log()` reads.
    const spawned = new Deno.Command(binary, { args, stdout: "null", stderr: "null" }).spawn();
    const listening = `listening on 127.0.0.1:${port}`;
    const deadline = Date.now() + 10_000;
    // A port that answers while this PgBouncer's log says nothing may be another program's.
    while (!((await readLog()).slice(logFrom).includes(listening) && await accepts(port))) {
      const exited = await Promise.race([
        spawned.status.then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), 50)),
      ]);
      if (exited || Date.now() > deadline) {
        try {
          spawned.kill("SIGKILL");
        } catch {
          // Already gone.
        }
        await spawned.status;
        const log = (await readLog()).slice(logFrom);
        throw new Error(`PgBouncer did not start on port ${port}:\n${log.slice(-2000)}`);
      }
    }
    child = spawned;
    say(`${mode} mode on 127.0.0.1:${port} → ${options.serverPort}`);
  };
  const stop = async () => {
    const running = child;
    if (running === undefined) return;
    child = undefined;
    try {
      // SIGTERM is PgBouncer 1.18's immediate shutdown (SIGINT would wait for clients to leave).
      running.kill("SIGTERM");
    } catch {
      // Already gone.
    }
    await running.status;
    // The port is free again once the listener is gone.
    const deadline = Date.now() + 5_000;
    while (await accepts(port) && Date.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
  };
  const remove = async () => {
    try {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    } finally {
      await watchdog.release();
    }
  };
  try {
    // A free port may be taken by another process before PgBouncer binds it: then try another.
    for (let attempt = 1;; attempt++) {
      await configure();
      try {
        await start();
        break;
      } catch (error) {
        const log = await Deno.readTextFile(`${dir}/pgbouncer.log`).catch(() => "");
        if (attempt >= 3 || !/Address already in use/.test(log)) throw error;
        await Deno.remove(`${dir}/pgbouncer.log`).catch(() => {});
        port = freePort();
      }
    }
  } catch (error) {
    await remove();
    throw error;
  }
  return {
    port,
    mode,
    via(url: string): string {
      const u = new URL(url);
      u.hostname = "127.0.0.1";
      u.port = String(port);
      return u.toString();
    },
    log: readLog,
    stop,
    start,
    destroy: async () => {
      try {
        await stop();
      } finally {
        await remove();
      }
    },
  };
}
