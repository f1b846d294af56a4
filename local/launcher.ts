/**
 * Starts a throw-away PostgreSQL cluster on a free loopback port, for tests, the demo and the
 * benchmarks. Works as root by running the server as an unprivileged user.
 *
 * @module
 */
import { findPostgresBinaries } from "./postgres_binaries.ts";

/** A running throw-away cluster. */
export interface LocalPostgres {
  /** Superuser connection URL of the `postgres` database. */
  url: string;
  port: number;
  dataDir: string;
  /** Stops the server (fast shutdown); the cluster can be started again. */
  stop(): Promise<void>;
  /** Starts a stopped server again on the same port with the same data. */
  start(): Promise<void>;
  /** Stops the server and deletes its data folder. */
  destroy(): Promise<void>;
}

/** Options for {@link startLocalPostgres}. */
export interface StartOptions {
  /** Print progress lines to stderr. */
  verbose?: boolean;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const { port } = listener.addr as Deno.NetAddr;
  listener.close();
  return port;
}

async function userExists(name: string): Promise<boolean> {
  const out = await new Deno.Command("id", { args: ["-u", name], stdout: "null", stderr: "null" })
    .output();
  return out.success;
}

/** Picks the user the server runs as: PostgreSQL refuses to run as root. */
async function serverUser(): Promise<string | undefined> {
  if (Deno.uid() !== 0) return undefined;
  for (const name of ["postgres", "nobody"]) {
    if (await userExists(name)) return name;
  }
  throw new Error("running as root, but neither a 'postgres' nor a 'nobody' user exists");
}

async function run(cmd: string, args: string[], user: string | undefined): Promise<void> {
  const [bin, argv] = user ? ["runuser", ["-u", user, "--", cmd, ...args]] : [cmd, args];
  const out = await new Deno.Command(bin, { args: argv, stdout: "piped", stderr: "piped" })
    .output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    throw new Error(`${cmd} ${args.join(" ")} failed:\n${text}`);
  }
}

/**
 * Starts a fresh cluster and returns once it accepts connections.
 *
 * @example
 * ```ts
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
  if (user) await run("chown", ["-R", user, dataDir], undefined);
  const log = (msg: string) => options.verbose && console.error(`[local-pg] ${msg}`);
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
  const port = freePort();
  // Durability settings are off: this cluster is thrown away, and tests want speed.
  const serverOptions = [
    `-p ${port}`,
    `-k ${dataDir}`,
    "-c listen_addresses=127.0.0.1",
    "-c fsync=off",
    "-c synchronous_commit=off",
    "-c full_page_writes=off",
    "-c max_connections=300",
    "-c shared_buffers=256MB",
  ].join(" ");
  const pgCtl = (args: string[]) =>
    run(`${binDir}/pg_ctl`, ["-D", `${dataDir}/data`, ...args], user);
  const start = () => pgCtl(["-l", `${dataDir}/server.log`, "-o", serverOptions, "-w", "start"]);
  let running = false;
  const stop = async () => {
    if (!running) return;
    await pgCtl(["-m", "fast", "-w", "stop"]);
    running = false;
  };
  await start();
  running = true;
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
      } finally {
        await Deno.remove(dataDir, { recursive: true }).catch(() => {});
      }
    },
  };
}
