/**
 * `pgflow install [--supabase-dir DIR]`: copies the engine's migrations into a Supabase project's
 * `supabase/migrations/` under new timestamps (as `supabase migration new` names files), once.
 * Run again, it adds only the missing ones and never rewrites a file; `supabase db push` (or
 * `supabase migration up` locally) then applies them.
 *
 * @module
 */
import { parseArgs } from "./args.ts";
import { engineMigrations, migrationText, sha256 } from "./shipped_migrations.ts";
import { CliError, progress, result } from "./output.ts";

/** The help text of `pgflow install`. */
export const INSTALL_HELP = `pgflow install [--supabase-dir DIR]

Writes the engine's SQL migrations into a Supabase project's supabase/migrations/, named like
\`supabase migration new\` names files (<UTC timestamp>_pgflow_<name>.sql), after the project's own
migrations. Run again after upgrading @pgflow/shared: it adds only the missing ones and never
changes a file already there. Then apply them: \`supabase db push\` to the linked project
(Supabase CLI 3: \`supabase db push --remote\`, with --yes in CI), or \`supabase migration up\`
for the local stack.

  --supabase-dir DIR  the project's supabase/ folder (the one holding config.toml), or the project
                      folder above it; default ./supabase

Exit codes: 0 written or up to date, 1 not a Supabase project or not writable, 2 usage error.`;

/**
 * Runs `pgflow install`; returns the exit code.
 *
 * @example
 * ```ts
 * import { install } from "./install.ts";
 *
 * // Deno.exit(await install(["--supabase-dir", "my-app/supabase"]));
 * ```
 */
export async function install(argv: readonly string[]): Promise<number> {
  const args = parseArgs(argv, { "supabase-dir": "string" }, "pgflow install");
  if (args.help) {
    result(INSTALL_HELP);
    return 0;
  }
  const supabaseDir = await findSupabaseDir(args.strings["supabase-dir"] ?? "supabase");
  const dir = `${supabaseDir}/migrations`;
  const existing = await listSql(dir);
  const engine = await engineMigrations();
  const installed = new Map<string, string>();
  for (const file of existing) {
    const m = /^\d+_(.+)\.sql$/.exec(file);
    if (m && engine.some((e) => e.label === m[1])) {
      if (installed.has(m[1])) {
        throw new CliError(
          `${dir} holds two copies of the engine migration ${m[1]} (${installed.get(m[1])} and ` +
            `${file}); nothing was written. Delete the one that was not applied ` +
            "(supabase migration list shows which)",
        );
      }
      installed.set(m[1], file);
    }
  }
  const missing = engine.filter((e) => !installed.has(e.label));
  const lastInstalled = engine.findLastIndex((e) => installed.has(e.label));
  const hole = missing.find((m) => engine.indexOf(m) < lastInstalled);
  if (hole) {
    const later = engine[lastInstalled];
    throw new CliError(
      `${dir} lacks the engine migration ${hole.label}, but holds the later ` +
        `${installed.get(later.label)}; nothing was written. Adding it now would apply it after ` +
        "the later one. Restore the file from version control (git restore), or, if it was " +
        "deliberately removed, ask for help: the schema may be half-applied",
    );
  }
  for (const e of engine) {
    const file = installed.get(e.label);
    if (file === undefined) continue;
    const text = await Deno.readTextFile(`${dir}/${file}`);
    if (await sha256(text) !== await sha256(await migrationText(e))) {
      progress(
        `warning: ${dir}/${file} differs from the engine's ${e.file}; it was kept as it is ` +
          "(install never rewrites a file). Engine migrations are not meant to be edited",
      );
    }
  }
  if (missing.length === 0) {
    progress(`up to date: all ${engine.length} engine migrations are in ${dir}`);
    return 0;
  }
  const texts = await Promise.all(missing.map((m) => migrationText(m)));
  await Deno.mkdir(dir, { recursive: true }).catch((error) => {
    throw new CliError(`cannot create ${dir}: ${(error as Error).message}`);
  });
  let stamp = firstStamp(existing);
  const written: string[] = [];
  try {
    for (const [i, m] of missing.entries()) {
      const path = `${dir}/${stamp}_${m.label}.sql`;
      await Deno.writeTextFile(path, texts[i], { createNew: true });
      written.push(path);
      stamp = nextStamp(stamp);
    }
  } catch (error) {
    for (const path of written) await Deno.remove(path).catch(() => {});
    throw new CliError(
      `cannot write into ${dir}: ${(error as Error).message}; nothing was written. Check the ` +
        "folder's permissions (run as its owner)",
    );
  }
  for (const path of written) result(path);
  progress(
    `wrote ${written.length} migration(s) into ${dir}` +
      (installed.size ? ` (${installed.size} were already there)` : "") +
      ". Next: `supabase db push` (Supabase CLI 3: `supabase db push --remote`; the local " +
      "stack: `supabase migration up`)",
  );
  return 0;
}

/** The project's `supabase/` folder: `dir` itself, or `dir/supabase`, holding config.toml. */
async function findSupabaseDir(dir: string): Promise<string> {
  const trimmed = dir.replace(/\/+$/, "") || "/";
  for (const candidate of [trimmed, `${trimmed}/supabase`]) {
    if (await isFile(`${candidate}/config.toml`)) return candidate;
  }
  const exists = await isDir(trimmed);
  throw new CliError(
    `${trimmed} is not a Supabase project folder: ${
      exists ? "it has no config.toml (nor supabase/config.toml)" : "it does not exist"
    }; nothing was written. Run \`supabase init\` in your project first, or pass ` +
      "--supabase-dir with your project's supabase/ folder",
  );
}

async function listSql(dir: string): Promise<string[]> {
  const out: string[] = [];
  try {
    for await (const e of Deno.readDir(dir)) {
      if (e.isFile && e.name.endsWith(".sql")) out.push(e.name);
    }
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) {
      throw new CliError(`cannot read ${dir}: ${(error as Error).message}`);
    }
  }
  return out.sort();
}

async function isFile(path: string): Promise<boolean> {
  return (await Deno.stat(path).catch(() => undefined))?.isFile ?? false;
}

async function isDir(path: string): Promise<boolean> {
  return (await Deno.stat(path).catch(() => undefined))?.isDirectory ?? false;
}

/** `YYYYMMDDHHMMSS` (UTC) of a time. */
function stampOf(date: Date): string {
  return date.toISOString().replace(/\D/g, "").slice(0, 14);
}

/** The time of a 14-digit stamp. */
function dateOf(stamp: string): Date {
  const [y, mo, d, h, mi, s] = [0, 4, 6, 8, 10, 12].map((i, k) =>
    Number(stamp.slice(i, i + (k === 0 ? 4 : 2)))
  );
  return new Date(Date.UTC(y, mo - 1, d, h, mi, s));
}

function nextStamp(stamp: string): string {
  return stampOf(new Date(dateOf(stamp).getTime() + 1000));
}

/** Now, or just after the newest existing migration when that is later (a clock behind). */
function firstStamp(existing: readonly string[]): string {
  const now = stampOf(new Date());
  const newest = existing.map((f) => /^(\d{14})_/.exec(f)?.[1]).filter((v) => v !== undefined)
    .sort().at(-1);
  return newest !== undefined && newest >= now ? nextStamp(newest) : now;
}
