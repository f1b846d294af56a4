/**
 * A local PostgreSQL cluster that keeps its data between starts, for one's own app (`pgflow db`).
 * It lives in one folder: `data/` (the cluster), `server.log`, `pgflow-db.json` (its port and
 * server binaries, so it comes back where it was) and a `.gitignore` that keeps the folder out of
 * git. It listens on 127.0.0.1 only, with trust authentication for user `postgres`. As root, the
 * server runs as the `postgres` (or `nobody`) user, which must be able to reach the folder.
 * Creating and starting it is for a caller holding the folder's lock (`lock.ts`).
 *
 * Creating survives being killed at any point (Ctrl-C, SIGTERM, SIGKILL): its first act is to
 * write `pgflow-db.creating`, initdb fills a temporary `data.new-…` folder that is renamed to
 * `data` only once complete, and the marker becomes `pgflow-db.json` by a rename as the last act.
 * A folder holding the marker is one a start did not finish: the next start completes it (when
 * `data` is there) or removes what it left and creates the cluster again ({@link
 * LocalCluster.recover}).
 *
 * @module
 */
import { findPostgresBinaries } from "./binaries.ts";
import { CliError, command } from "../output.ts";
import { freePort, portIsFree, run, runTool, serverUser } from "./server.ts";
import { testPause } from "./test_pause.ts";
import { Made } from "./made.ts";

/** The folder `pgflow db` uses when none is given, from the current directory. */
export const DEFAULT_DATA_DIR = ".pgflow/db";

/** The ports tried first for a new cluster (Supabase's local stack uses 54321-54329). */
const PREFERRED_PORTS = Array.from({ length: 70 }, (_, i) => 54330 + i);

const META = "pgflow-db.json";
/** Written first by a start that creates the cluster; renamed to {@link META} last. */
const MARKER = "pgflow-db.creating";
/** The prefix of the folder initdb fills before it is renamed to `data`. */
const DATA_TEMP = "data.new-";

/** What `pgflow-db.json` holds. */
interface Meta {
  readonly port: number;
  readonly binDir: string;
  readonly createdAt: string;
}

/** What the marker of an unfinished creation holds (all of it, once initdb is done). */
type Marker = Partial<Meta>;

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
  #marker: Marker | undefined;
  readonly #user: string | undefined;

  private constructor(
    dir: string,
    meta: Meta | undefined,
    marker: Marker | undefined,
    user: string | undefined,
  ) {
    this.dir = dir;
    this.#meta = meta;
    this.#marker = marker;
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
    const marker = meta === undefined ? await readMarker(abs) : undefined;
    if (meta === undefined && marker === undefined && await nonEmpty(abs)) {
      throw new CliError(
        `${abs} exists and is not a pgflow database folder (no ${META}); nothing was changed. ` +
          "Pass --data-dir with a new or empty folder",
      );
    }
    return new LocalCluster(abs, meta, marker, await serverUser());
  }

  /** Whether a start that was creating the cluster here did not finish (see {@link recover}). */
  get interrupted(): boolean {
    return this.#meta === undefined && this.#marker !== undefined;
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
   * Call it holding the folder's lock (`withFolderLock`). A failure removes what this call made and
   * nothing else: a folder something else has put files in stays.
   */
  async create(port?: number): Promise<void> {
    if (this.#meta !== undefined) return;
    if (this.interrupted) throw new Error(`${this.dir}: recover() the interrupted start first`);
    const { binDir } = await findPostgresBinaries();
    const made = new Made();
    try {
      await this.#make(made, binDir, port);
    } catch (error) {
      const left = await made.undo();
      if (left.length === 0) throw error;
      throw new CliError(
        `${(error as Error).message} (${left.join(", ")} stayed: it holds files this command ` +
          "did not make)",
      );
    }
  }

  async #make(made: Made, binDir: string, port: number | undefined): Promise<void> {
    await made.folders(this.dir);
    // First, so that whatever a kill leaves here is known for an unfinished start's.
    const marker: Marker = { port, binDir, createdAt: new Date().toISOString() };
    await made.file(`${this.dir}/${MARKER}`, JSON.stringify(marker) + "\n").catch((error) => {
      throw error instanceof Deno.errors.AlreadyExists ? this.#appeared(MARKER) : error;
    });
    await made.file(`${this.dir}/.gitignore`, "# pgflow db: local data, never committed\n*\n")
      .catch((error) => {
        throw error instanceof Deno.errors.AlreadyExists ? this.#appeared(".gitignore") : error;
      });
    if (this.#user) {
      await run("chown", [this.#user, this.dir], undefined);
      const { code } = await runTool("test", ["-w", this.dir, "-a", "-x", this.dir], this.#user);
      if (code !== 0) {
        throw new CliError(
          `the server must run as user ${this.#user} (PostgreSQL refuses to run as root), and ` +
            `${this.#user} cannot reach ${this.dir}: a folder above it is closed to other users ` +
            "(e.g. /root is 700). Nothing was created. Pass --data-dir with a folder it can " +
            "reach (e.g. /var/tmp/pgflow/<app>), or run as a normal user",
        );
      }
    }
    await testPause("initdb");
    const data = `${this.dir}/data`;
    if (await exists(data)) throw this.#appeared("data");
    // initdb fills a folder of this call's own, made here exclusively: a failed initdb (which
    // empties the folder it was given) removes nothing else, and `data` appears only complete.
    const temp = `${this.dir}/${DATA_TEMP}${crypto.randomUUID().slice(0, 8)}`;
    await made.folder(temp, 0o700);
    if (this.#user) await run("chown", [this.#user, temp], undefined);
    try {
      await run(`${binDir}/initdb`, [
        "-D",
        temp,
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--locale=C",
      ], this.#user);
    } catch (error) {
      throw new CliError(`initdb failed, nothing was kept: ${(error as Error).message}`);
    }
    made.own(temp);
    if (await exists(data)) throw this.#appeared("data");
    await made.move(temp, data);
    await testPause("record");
    await this.#record({
      port: port ?? freePort(PREFERRED_PORTS),
      binDir,
      createdAt: marker.createdAt!,
    });
  }

  /**
   * Finishes, or clears away, what a start that was killed while creating the cluster left (see
   * the module's doc): `completed` when initdb had finished (the cluster is recorded, with `port`
   * if given, else the port that start was given or picked, else a free one), `cleaned` when it
   * had not (the folder is empty again: {@link create} makes the cluster). Call it holding the
   * folder's lock. Anything in the folder that such a start does not make is refused, untouched.
   */
  async recover(port?: number): Promise<"completed" | "cleaned"> {
    const marker = this.#marker;
    if (this.#meta !== undefined || marker === undefined) {
      throw new Error(`${this.dir}: no interrupted start to recover`);
    }
    const names: string[] = [];
    for await (const entry of Deno.readDir(this.dir)) names.push(entry.name);
    const ours = [MARKER, `${MARKER}.new`, ".gitignore", "data", `${META}.new`];
    const foreign = names.filter((n) => !ours.includes(n) && !n.startsWith(DATA_TEMP));
    if (foreign.length > 0) {
      throw new CliError(
        `${this.dir} holds what an interrupted db start left, and ${foreign.join(", ")}, which ` +
          "pgflow did not make there; nothing was changed. Move that away, or pass --data-dir " +
          "with another folder",
      );
    }
    for (const name of names) {
      if (name.startsWith(DATA_TEMP)) await removeLeftover(`${this.dir}/${name}`);
    }
    for (const name of [`${MARKER}.new`, `${META}.new`]) {
      await removeLeftover(`${this.dir}/${name}`);
    }
    if (names.includes("data")) {
      // Renamed to `data` only once initdb had finished: the cluster is whole, only unrecorded.
      const binDir = marker.binDir ?? (await findPostgresBinaries()).binDir;
      await this.#record({
        port: port ?? marker.port ?? freePort(PREFERRED_PORTS),
        binDir,
        createdAt: marker.createdAt ?? new Date().toISOString(),
      });
      return "completed";
    }
    for (const name of [MARKER, ".gitignore"]) await removeLeftover(`${this.dir}/${name}`);
    this.#marker = undefined;
    return "cleaned";
  }

  /**
   * Records a cluster just made: the marker takes the meta's content (written aside and renamed
   * over it), then becomes the meta by a rename, so that at every moment the folder holds one or
   * the other, never neither.
   */
  async #record(meta: Meta): Promise<void> {
    const marker = `${this.dir}/${MARKER}`;
    await Deno.writeTextFile(`${marker}.new`, JSON.stringify(meta, null, 2) + "\n");
    await Deno.rename(`${marker}.new`, marker);
    await Deno.rename(marker, `${this.dir}/${META}`);
    this.#meta = meta;
    this.#marker = undefined;
  }

  #appeared(name: string): CliError {
    return new CliError(
      `${this.dir}/${name} appeared while the database was being created: something other than ` +
        `pgflow writes in ${this.dir}. Nothing of it was touched, and what this command made was ` +
        "removed. Stop what writes there, or pass --data-dir with another folder",
    );
  }

  /** Records the port and binaries; written aside and renamed, so a reader never sees half. */
  async #writeMeta(meta: Meta): Promise<void> {
    const path = `${this.dir}/${META}`;
    await Deno.writeTextFile(`${path}.new`, JSON.stringify(meta, null, 2) + "\n");
    await Deno.rename(`${path}.new`, path);
    this.#meta = meta;
  }

  /**
   * Starts the server (on `port` when given, recorded for later starts); no-op when running.
   * `movable`: the port was picked for a cluster made just now, not chosen by the user, so when
   * another program takes it first (between the pick and the bind), the next free one is used.
   */
  async start(port?: number, { movable = false }: { movable?: boolean } = {}): Promise<void> {
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
    const binDir = await this.#binDir();
    // pg_ctl starts the server through `sh -c`: a path it quotes there must mean only itself.
    for (const [path, fix] of [[this.dir, "Pass --data-dir"], [binDir, "Set PGFLOW_PG_BIN to"]]) {
      const special = shellSpecial(path);
      if (special) {
        throw new CliError(
          `${
            JSON.stringify(path)
          } holds ${special}, which pg_ctl hands to a shell: the server was ` +
            `not started. ${fix} a folder without $ \` " or \\`,
        );
      }
    }
    await testPause("bind");
    let target = port ?? meta.port;
    const tried = new Set<number>();
    for (;;) {
      tried.add(target);
      if (!portIsFree(target)) {
        if (movable && tried.size < 5) {
          target = freePort(PREFERRED_PORTS.filter((p) => !tried.has(p)));
          continue;
        }
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
        `${binDir}/pg_ctl`,
        ["-D", `${this.dir}/data`, "-l", log, "-o", options, "-w", "-t", "60", "start"],
        this.#user,
      );
      if (code === 0) break;
      const tail = (await Deno.readTextFile(log).catch(() => "")).split("\n").slice(-12).join(
        "\n",
      );
      // Taken between the check and the bind (another start racing this one): try the next.
      if (movable && tried.size < 5 && /could not bind .* Address already in use/.test(tail)) {
        target = freePort(PREFERRED_PORTS.filter((p) => !tried.has(p)));
        continue;
      }
      throw new CliError(
        `the database in ${this.dir} did not start:\n${output.trim()}\n${tail.trim()}\n` +
          `(full log: ${log})`,
      );
    }
    if (target !== meta.port) await this.#writeMeta({ ...meta, port: target });
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

/**
 * The characters of `path` that a shell interprets inside double quotes (`$`, backtick, `"`, `\\`),
 * as `pg_ctl start` quotes the folder and the log in the command it hands to `sh -c`; "" if none.
 *
 * @example
 * ```ts
 * import { shellSpecial } from "./cluster.ts";
 *
 * shellSpecial("/tmp/x$(id)"); // "$"
 * ```
 */
export function shellSpecial(path: string): string {
  return [...new Set(path.match(/[$`"\\]/g) ?? [])].join(" ");
}

/**
 * The absolute path of the folder `dir` (relative to the current directory), without `.`/`..`.
 *
 * @example
 * ```ts
 * import { absolute } from "./cluster.ts";
 *
 * absolute(".pgflow/db"); // e.g. "/home/me/app/.pgflow/db"
 * ```
 */
export function absolute(dir: string): string {
  const joined = dir.startsWith("/") ? dir : `${Deno.cwd()}/${dir}`;
  const parts: string[] = [];
  for (const part of joined.split("/")) {
    if (part === "" || part === ".") continue;
    if (part === "..") parts.pop();
    else parts.push(part);
  }
  return `/${parts.join("/")}`;
}

/** The marker of an unfinished creation in `dir` (empty if a kill cut its writing short). */
async function readMarker(dir: string): Promise<Marker | undefined> {
  let text: string;
  try {
    text = await Deno.readTextFile(`${dir}/${MARKER}`);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return undefined;
    throw error;
  }
  try {
    const marker = JSON.parse(text);
    return marker !== null && typeof marker === "object" ? marker as Marker : {};
  } catch {
    return {};
  }
}

/**
 * Removes `path` (a file, or a folder and all in it). An initdb of the start that was killed may
 * still be writing in it: its files vanish under it and it gives up, so the removal is tried
 * again for a few seconds.
 */
async function removeLeftover(path: string): Promise<void> {
  for (let attempt = 1;; attempt++) {
    try {
      await Deno.remove(path, { recursive: true });
      return;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) return;
      if (attempt >= 50) {
        throw new CliError(
          `${path}, left by an interrupted db start, could not be removed ` +
            `(${(error as Error).message}); remove it and start again`,
        );
      }
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
}

async function exists(path: string): Promise<boolean> {
  return await Deno.lstat(path).then(() => true, () => false);
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
