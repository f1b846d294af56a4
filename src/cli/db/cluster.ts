/**
 * A local PostgreSQL cluster that keeps its data between starts, for one's own app (`pgflow db`).
 * It lives in one folder: `data/` (the cluster), `server.log`, `pgflow-db.json` (its port and
 * server binaries, so it comes back where it was) and a `.gitignore` that keeps the folder out of
 * git. It listens on 127.0.0.1 only, with trust authentication for user `postgres`. As root, the
 * server runs as the `postgres` (or `nobody`) user, which must be able to reach the folder.
 *
 * @module
 */
import { findPostgresBinaries } from "./binaries.ts";
import { CliError, command } from "../output.ts";
import { freePort, portIsFree, run, runTool, serverUser } from "./server.ts";

/** The folder `pgflow db` uses when none is given, from the current directory. */
export const DEFAULT_DATA_DIR = ".pgflow/db";

/** The ports tried first for a new cluster (Supabase's local stack uses 54321-54329). */
const PREFERRED_PORTS = Array.from({ length: 70 }, (_, i) => 54330 + i);

const META = "pgflow-db.json";

/** What `pgflow-db.json` holds. */
interface Meta {
  readonly port: number;
  readonly binDir: string;
  readonly createdAt: string;
}

/**
 * Where a cluster is: no cluster in the folder, created but stopped, or running.
 *
 * @example
 * ```ts
 * import type { ClusterState } from "./cluster.ts";
 *
 * const state: ClusterState = "running";
 * ```
 */
export type ClusterState = "absent" | "stopped" | "running";

/**
 * A cluster folder. Open one with {@link LocalCluster.open}; it may not exist yet.
 *
 * @example
 * ```ts
 * import { LocalCluster } from "./cluster.ts";
 *
 * const cluster = await LocalCluster.open(".pgflow/db");
 * if (await cluster.state() === "absent") await cluster.create();
 * await cluster.start();
 * console.log(cluster.url);
 * ```
 */
export class LocalCluster {
  /** The cluster's folder, absolute. */
  readonly dir: string;
  #meta: Meta | undefined;
  readonly #user: string | undefined;

  private constructor(dir: string, meta: Meta | undefined, user: string | undefined) {
    this.dir = dir;
    this.#meta = meta;
    this.#user = user;
  }

  /**
   * Opens the folder `dir` (relative to the current directory). A folder that exists but holds
   * something other than a cluster made here is refused, so nothing in it is touched.
   */
  static async open(dir: string): Promise<LocalCluster> {
    const abs = absolute(dir);
    let meta: Meta | undefined;
    try {
      meta = JSON.parse(await Deno.readTextFile(`${abs}/${META}`)) as Meta;
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) {
        throw new CliError(
          `${abs}/${META} is unreadable (${(error as Error).message}); it records the cluster's ` +
            "port: restore it, or move the folder away and start again",
        );
      }
    }
    if (meta === undefined && await nonEmpty(abs)) {
      throw new CliError(
        `${abs} exists and is not a pgflow database folder (no ${META}); nothing was changed. ` +
          "Pass --data-dir with a new or empty folder",
      );
    }
    return new LocalCluster(abs, meta, await serverUser());
  }

  /** The recorded port; `undefined` before {@link create}. */
  get port(): number | undefined {
    return this.#meta?.port;
  }

  /** The superuser URL of the `postgres` database; `undefined` before {@link create}. */
  get url(): string | undefined {
    return this.#meta && `postgres://postgres@127.0.0.1:${this.#meta.port}/postgres`;
  }

  /** The server binaries the cluster was made with. */
  get binDir(): string | undefined {
    return this.#meta?.binDir;
  }

  /** Whether the cluster exists and whether its server runs. */
  async state(): Promise<ClusterState> {
    if (this.#meta === undefined) return "absent";
    const { code } = await runTool(
      `${await this.#binDir()}/pg_ctl`,
      ["-D", `${this.dir}/data`, "status"],
      this.#user,
    );
    return code === 0 ? "running" : "stopped";
  }

  /**
   * Creates the cluster (initdb) and records its port: `port`, else the first free one from 54330.
   */
  async create(port?: number): Promise<void> {
    if (this.#meta !== undefined) return;
    const { binDir } = await findPostgresBinaries();
    // What to remove if creating fails: the topmost folder this call creates (or just the files
    // in an existing empty folder), so a failure leaves nothing behind.
    const created = await firstMissing(this.dir);
    const undo = () =>
      created === undefined
        ? Promise.all(
          [".gitignore", "data", META].map((f) =>
            Deno.remove(`${this.dir}/${f}`, { recursive: true }).catch(() => {})
          ),
        )
        : Deno.remove(created, { recursive: true }).catch(() => {});
    await Deno.mkdir(this.dir, { recursive: true });
    await Deno.writeTextFile(
      `${this.dir}/.gitignore`,
      "# pgflow db: local data, never committed\n*\n",
    );
    if (this.#user) {
      await run("chown", [this.#user, this.dir], undefined);
      const { code } = await runTool("test", ["-w", this.dir, "-a", "-x", this.dir], this.#user);
      if (code !== 0) {
        await undo();
        throw new CliError(
          `the server must run as user ${this.#user} (PostgreSQL refuses to run as root), and ` +
            `${this.#user} cannot reach ${this.dir}: a folder above it is closed to other users ` +
            "(e.g. /root is 700). Nothing was created. Pass --data-dir with a folder it can " +
            "reach (e.g. /var/tmp/pgflow/<app>), or run as a normal user",
        );
      }
    }
    try {
      await run(`${binDir}/initdb`, [
        "-D",
        `${this.dir}/data`,
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--locale=C",
      ], this.#user);
    } catch (error) {
      await undo();
      throw new CliError(`initdb failed, nothing was kept: ${(error as Error).message}`);
    }
    const meta: Meta = {
      port: port ?? freePort(PREFERRED_PORTS),
      binDir,
      createdAt: new Date().toISOString(),
    };
    await Deno.writeTextFile(`${this.dir}/${META}`, JSON.stringify(meta, null, 2) + "\n");
    this.#meta = meta;
  }

  /** Starts the server (on `port` when given, recorded for later starts); no-op when running. */
  async start(port?: number): Promise<void> {
    const meta = this.#requireMeta();
    if (await this.state() === "running") {
      if (port !== undefined && port !== meta.port) {
        throw new CliError(
          `the database in ${this.dir} is running on port ${meta.port}, not ${port}; stop it ` +
            `first (${command("db stop")}) to move it to ${port}`,
        );
      }
      return;
    }
    const target = port ?? meta.port;
    if (!portIsFree(target)) {
      throw new CliError(
        `port ${target} on 127.0.0.1 is in use by another program, so the database in ` +
          `${this.dir} cannot start there. Stop that program, or start on another port with ` +
          `--port <n>`,
      );
    }
    const options = [
      `-p ${target}`,
      "-c listen_addresses=127.0.0.1",
      "-c unix_socket_directories=''",
    ].join(" ");
    const log = `${this.dir}/server.log`;
    const { code, output } = await runTool(
      `${await this.#binDir()}/pg_ctl`,
      ["-D", `${this.dir}/data`, "-l", log, "-o", options, "-w", "-t", "60", "start"],
      this.#user,
    );
    if (code !== 0) {
      const tail = (await Deno.readTextFile(log).catch(() => "")).split("\n").slice(-12).join(
        "\n",
      );
      throw new CliError(
        `the database in ${this.dir} did not start:\n${output.trim()}\n${tail.trim()}\n` +
          `(full log: ${log})`,
      );
    }
    if (target !== meta.port) {
      this.#meta = { ...meta, port: target };
      await Deno.writeTextFile(`${this.dir}/${META}`, JSON.stringify(this.#meta, null, 2) + "\n");
    }
  }

  /** Stops the server (fast shutdown: sessions are disconnected); the data stays. */
  async stop(): Promise<void> {
    this.#requireMeta();
    if (await this.state() !== "running") return;
    await run(
      `${await this.#binDir()}/pg_ctl`,
      ["-D", `${this.dir}/data`, "-m", "fast", "-w", "stop"],
      this.#user,
    );
  }

  /** `PGFLOW_PG_BIN` when set, else the binaries it was made with, else any found now. */
  async #binDir(): Promise<string> {
    const recorded = this.#requireMeta().binDir;
    if (Deno.env.get("PGFLOW_PG_BIN")) return (await findPostgresBinaries()).binDir;
    if (await Deno.stat(`${recorded}/pg_ctl`).then(() => true, () => false)) return recorded;
    return (await findPostgresBinaries()).binDir;
  }

  #requireMeta(): Meta {
    if (this.#meta === undefined) {
      throw new CliError(
        `there is no database in ${this.dir}: create and start one with ` +
          `\`${command("db start")}\` (with the same --data-dir)`,
      );
    }
    return this.#meta;
  }
}

function absolute(dir: string): string {
  const joined = dir.startsWith("/") ? dir : `${Deno.cwd()}/${dir}`;
  const parts: string[] = [];
  for (const part of joined.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return `/${parts.join("/")}`;
}

/** The topmost folder of `dir`'s path that does not exist yet; `undefined` when `dir` exists. */
async function firstMissing(dir: string): Promise<string | undefined> {
  let missing: string | undefined;
  for (let d = dir; d !== "/" && d !== ""; d = d.slice(0, d.lastIndexOf("/")) || "/") {
    if (await Deno.stat(d).then(() => true, () => false)) break;
    missing = d;
  }
  return missing;
}

async function nonEmpty(dir: string): Promise<boolean> {
  try {
    for await (const _ of Deno.readDir(dir)) return true;
    return false;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    if (error instanceof Deno.errors.NotADirectory) return true;
    throw error;
  }
}
