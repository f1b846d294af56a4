/**
 * Starts a throw-away PostgreSQL cluster on a free loopback port, for tests, the demo and the
 * benchmarks. Works as root by running the server as an unprivileged user. The server never
 * outlives the process that started it: a watchdog (`watchdog.ts`) stops it and removes its folder
 * when that process ends without `destroy`. For a cluster that keeps its data, see `cluster.ts`
 * (`pgflow db`).
 *
 * @module
 */
import { findPostgresBinaries } from "./binaries.ts";
import { freePort, run, runTool, serverUser } from "./server.ts";
import { startWatchdog } from "./watchdog.ts";

/**
 * A running throw-away cluster.
 *
 * @example
 * ```ts
 * import { type LocalPostgres, startLocalPostgres } from "./launcher.ts";
 *
 * const pg: LocalPostgres = await startLocalPostgres();
 * await pg.destroy();
 * ```
 */
export interface LocalPostgres {
  /** Superuser connection URL of the `postgres` database. */
  url: string;
  /** The port it listens on (127.0.0.1). */
  port: number;
  /** The folder holding the cluster (removed by `destroy`). */
  dataDir: string;
  /** Stops the server (fast shutdown); the cluster can be started again. */
  stop(): Promise<void>;
  /** Starts a stopped server again on the same port with the same data. */
  start(): Promise<void>;
  /** Stops the server and deletes its data folder. */
  destroy(): Promise<void>;
}

/**
 * Options for {@link startLocalPostgres}.
 *
 * @example
 * ```ts
 * import type { StartOptions } from "./launcher.ts";
 *
 * const options: StartOptions = { verbose: true };
 * ```
 */
export interface StartOptions {
  /** Print progress lines to stderr. */
  verbose?: boolean;
  /**
   * Keep Postgres' durable defaults (`fsync`, `synchronous_commit` and `full_page_writes` on), as
   * on Supabase; the benchmarks use this so commit cost is counted. Default false: tests want speed.
   */
  durable?: boolean;
}

/**
 * Starts a fresh cluster and returns once it accepts connections.
 *
 * @example
 * ```ts
 * import { startLocalPostgres } from "./launcher.ts";
 *
 * const pg = await startLocalPostgres();
 * try {
 *   console.log(pg.url); // postgres://postgres@127.0.0.1:54xxx/postgres
 * } finally {
 *   await pg.destroy();
 * }
 * ```
 */
export async function startLocalPostgres(options: StartOptions = {}): Promise<LocalPostgres> {
  const { binDir, source } = await findPostgresBinaries();
  const user = await serverUser();
  const dataDir = await Deno.makeTempDir({ prefix: "pgflow-pg-" });
  const asUser = user ? ["runuser", "-u", user, "--"] : [];
  const watchdog = startWatchdog({
    what: `the throw-away Postgres in ${dataDir}`,
    dir: dataDir,
    stop: [...asUser, `${binDir}/pg_ctl`, "-D", `${dataDir}/data`, "-m", "immediate", "-w", "stop"],
  });
  const pgCtl = (args: string[]) =>
    run(`${binDir}/pg_ctl`, ["-D", `${dataDir}/data`, ...args], user);
  const remove = async () => {
    try {
      await Deno.remove(dataDir, { recursive: true }).catch(() => {});
    } finally {
      await watchdog.release();
    }
  };
  const log = (msg: string) => options.verbose && console.error(`[local-pg] ${msg}`);
  let port: number;
  let serverOptions: string;
  try {
    if (user) await run("chown", ["-R", user, dataDir], undefined);
    log(`initdb (${source} binaries in ${binDir}) at ${dataDir}`);
    await run(`${binDir}/initdb`, [
      "-D",
      `${dataDir}/data`,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--locale=C",
      "--no-sync",
    ], user);
    // Durability settings are off unless asked for: this cluster is thrown away, and tests want
    // speed; the benchmarks ask for them so commit cost shows in their figures.
    const durability = options.durable
      ? []
      : ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"];
    const optionsOn = (p: number) =>
      [
        `-p ${p}`,
        // TCP only: a socket path in a deep temporary folder can pass the 107-byte limit.
        "-c unix_socket_directories=''",
        "-c listen_addresses=127.0.0.1",
        ...durability,
        "-c max_connections=300",
        "-c shared_buffers=256MB",
      ].join(" ");
    // A free port may be taken by another process before the server binds it (test runs and
    // servers start side by side): then try another.
    for (let attempt = 1;; attempt++) {
      port = freePort();
      serverOptions = optionsOn(port);
      try {
        await pgCtl(["-l", `${dataDir}/server.log`, "-o", serverOptions, "-w", "start"]);
        break;
      } catch (error) {
        const serverLog = await Deno.readTextFile(`${dataDir}/server.log`).catch(() => "");
        if (attempt >= 3 || !/could not bind|Address already in use/.test(serverLog)) throw error;
        log(`port ${port} was taken before the server bound it; trying another`);
      }
    }
  } catch (error) {
    await runTool(`${binDir}/pg_ctl`, ["-D", `${dataDir}/data`, "-m", "immediate", "stop"], user);
    await remove();
    throw error;
  }
  const start = () => pgCtl(["-l", `${dataDir}/server.log`, "-o", serverOptions, "-w", "start"]);
  let running = true;
  const stop = async () => {
    if (!running) return;
    await pgCtl(["-m", "fast", "-w", "stop"]);
    running = false;
  };
  log(`listening on 127.0.0.1:${port}`);
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    dataDir,
    stop,
    start: async () => {
      if (running) return;
      await start();
      running = true;
    },
    destroy: async () => {
      try {
        await stop();
      } catch (error) {
        // The folder goes and the watchdog is released: nothing may keep running without either.
        await runTool(
          `${binDir}/pg_ctl`,
          ["-D", `${dataDir}/data`, "-m", "immediate", "stop"],
          user,
        );
        throw error;
      } finally {
        await remove();
      }
    },
  };
}
