/**
 * The programs some tests need besides Deno and Postgres: PgBouncer (the pooler tests, standing in
 * for Supavisor), Chromium (the dashboard's browser test) and pg_cron (the Edge keep-alive tests,
 * `tests/edge/`). `provision()` is the test command's
 * first stage: a missing one is installed from Debian when the run can (root, `apt-get` present),
 * quietly, with its output in a log file; otherwise it says which tests will fail and the command
 * that installs the program. The tests themselves never skip: without the program they fail with
 * {@link notInstalled}'s message.
 *
 * @module
 */

/** A program some tests need, and the Debian package that has it. */
export interface Program {
  /** How it is named in messages, e.g. `PgBouncer`. */
  readonly name: string;
  /** The Debian package to install. */
  readonly aptPackage: string;
  /** The tests that fail without it. */
  readonly neededBy: string;
  /** Where the binary is, or `undefined` when it is not installed. */
  find(): string | undefined;
}

/** The install command for the given Debian packages, as root. */
export function installCommand(packages: readonly string[]): string {
  return `apt-get install -y --no-install-recommends ${packages.join(" ")}`;
}

/**
 * The one-line error of a test that needs `program` on a machine without it: what is missing,
 * the exact command that installs it, and the variable that points at another binary.
 *
 * @example
 * ```ts
 * throw new Error(notInstalled(PGBOUNCER, "PGFLOW_PGBOUNCER"));
 * ```
 */
export function notInstalled(program: Program, variable: string): string {
  return `${program.name} is not installed (${program.neededBy} need it): install it with ` +
    `\`${installCommand([program.aptPackage])}\` as root (\`deno task ci\` does when run as ` +
    `root), or set ${variable} to its binary`;
}

/** Whether `path` is a regular file. */
function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

/** Finds `name` as the shell would: a path as given, a bare name on `PATH`. */
export function onPath(name: string, path = Deno.env.get("PATH") ?? ""): string | undefined {
  if (name.includes("/")) return isFile(name) ? name : undefined;
  return path.split(":").filter(Boolean).map((dir) => `${dir}/${name}`).find(isFile);
}

const PGBOUNCER_PATHS = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer", "/usr/local/bin/pgbouncer"];

/** PgBouncer: `PGFLOW_PGBOUNCER` when set, else a Debian or local install. */
export const PGBOUNCER: Program = {
  name: "PgBouncer",
  aptPackage: "pgbouncer",
  neededBy: "the pooler tests",
  find() {
    const explicit = Deno.env.get("PGFLOW_PGBOUNCER");
    return (explicit ? [explicit] : PGBOUNCER_PATHS).find(isFile);
  },
};

/** Chromium: `CHROMIUM` when set, else Debian's `chromium` on `PATH`. */
export const CHROMIUM: Program = {
  name: "Chromium",
  aptPackage: "chromium",
  neededBy: "the dashboard's browser tests",
  find: () => onPath(Deno.env.get("CHROMIUM") ?? "chromium"),
};

/**
 * The share folder (`pg_config --sharedir`) of the server binaries the tests use, where extension
 * control files live; `undefined` when it cannot be read.
 */
export function postgresShareDir(): string | undefined {
  const explicit = Deno.env.get("PGFLOW_PG_BIN");
  const candidates = explicit ? [explicit] : debianBinDirs();
  for (const dir of candidates) {
    const pgConfig = `${dir}/pg_config`;
    if (!isFile(pgConfig)) continue;
    try {
      const out = new Deno.Command(pgConfig, { args: ["--sharedir"], stderr: "null" }).outputSync();
      if (out.success) return new TextDecoder().decode(out.stdout).trim();
    } catch {
      // Not runnable: try the next one.
    }
  }
  return undefined;
}

/** Debian's server binary folders, newest major version first. */
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

/** The major version of the Debian server the tests use (the package names carry it). */
function debianMajor(): string {
  return /postgresql\/(\d+)\//.exec(debianBinDirs()[0] ?? "")?.[1] ?? "15";
}

/**
 * pg_cron from Debian (`postgresql-<major>-cron`): the real extension, which the Edge keep-alive
 * test loads into a server of its own (`shared_preload_libraries`).
 */
export const PG_CRON: Program = {
  name: "pg_cron",
  aptPackage: `postgresql-${debianMajor()}-cron`,
  neededBy: "the Edge keep-alive tests",
  find() {
    const share = postgresShareDir();
    const control = share === undefined ? undefined : `${share}/extension/pg_cron.control`;
    return control !== undefined && isFile(control) ? control : undefined;
  },
};

/** Every program the suite needs beyond Deno and Postgres. */
export const PROGRAMS: readonly Program[] = [PGBOUNCER, CHROMIUM, PG_CRON];

/** Options of {@link provision}; the defaults are the real machine's. */
export interface ProvisionOptions {
  /** Default {@link PROGRAMS}. */
  readonly programs?: readonly Program[];
  /** Default: whether this process runs as root. */
  readonly root?: boolean;
  /** The `apt-get` to run; default the one on `PATH`; `null`: there is none. */
  readonly aptGet?: string | null;
  /** Where progress goes; default stderr. */
  readonly write?: (text: string) => void;
}

/** What {@link provision} did. */
export interface ProvisionResult {
  /** Programs that were there already or are now. */
  readonly present: readonly string[];
  /** Programs this run installed. */
  readonly installed: readonly string[];
  /** Programs still missing (their tests will fail with the install command). */
  readonly missing: readonly string[];
  /** apt-get's output, kept when the install failed. */
  readonly log?: string;
}

/**
 * Installs the missing programs when it can, printing one line; prints nothing when all are there.
 *
 * @example
 * ```ts
 * const { missing } = await provision();
 * if (missing.length) console.error(`these tests will fail: ${missing}`);
 * ```
 */
export async function provision(options: ProvisionOptions = {}): Promise<ProvisionResult> {
  const programs = options.programs ?? PROGRAMS;
  const write = options.write ??
    ((text: string) => Deno.stderr.writeSync(new TextEncoder().encode(text)));
  const missing = programs.filter((p) => p.find() === undefined);
  const present = programs.filter((p) => !missing.includes(p)).map((p) => p.name);
  if (missing.length === 0) return { present, installed: [], missing: [] };

  const names = missing.map((p) => p.name).join(" and ");
  const packages = missing.map((p) => p.aptPackage);
  const aptGet = options.aptGet === undefined ? onPath("apt-get") : options.aptGet ?? undefined;
  const root = options.root ?? Deno.uid() === 0;
  if (!root || aptGet === undefined) {
    const why = aptGet === undefined ? "there is no apt-get" : "this run is not root";
    write(
      `[provision] ${names} not installed and ${why}: ${
        missing.map((p) => p.neededBy).join(" and ")
      } will fail. Install with: ${root ? "" : "sudo "}${installCommand(packages)}\n`,
    );
    return { present, installed: [], missing: missing.map((p) => p.name) };
  }

  const log = await Deno.makeTempFile({ prefix: "pgflow-provision-", suffix: ".log" });
  const started = Date.now();
  write(`[provision] installing ${packages.join(", ")} (apt-get; log: ${log}) ...`);
  try {
    const apt = async (args: string[]) => {
      const out = await new Deno.Command(aptGet, {
        // Waits for another apt run's lock instead of failing at once.
        args: ["-o", "DPkg::Lock::Timeout=300", ...args],
        env: { DEBIAN_FRONTEND: "noninteractive" },
        stdin: "null",
      }).output();
      await Deno.writeFile(log, out.stdout, { append: true });
      await Deno.writeFile(log, out.stderr, { append: true });
      return out.success;
    };
    const install = ["install", "-y", "--no-install-recommends", ...packages];
    // A fresh machine's package lists may be missing or stale: update once, then try again.
    const ok = await apt(install) || (await apt(["update"]) && await apt(install));
    const still = missing.filter((p) => p.find() === undefined);
    const seconds = Math.round((Date.now() - started) / 1000);
    if (ok && still.length === 0) {
      write(` done (${seconds} s)\n`);
      await Deno.remove(log).catch(() => {});
      return {
        present: programs.map((p) => p.name),
        installed: missing.map((p) => p.name),
        missing: [],
      };
    }
    write(
      ` FAILED (${seconds} s; see ${log}): ${
        still.map((p) => p.neededBy).join(" and ")
      } will fail\n`,
    );
    return {
      present: programs.filter((p) => !still.includes(p)).map((p) => p.name),
      installed: missing.filter((p) => !still.includes(p)).map((p) => p.name),
      missing: still.map((p) => p.name),
      log,
    };
  } catch (error) {
    write(` FAILED: ${error instanceof Error ? error.message : error}\n`);
    return { present, installed: [], missing: missing.map((p) => p.name), log };
  }
}

if (import.meta.main) {
  const { missing } = await provision();
  Deno.exit(missing.length ? 1 : 0);
}
