/**
 * The manifest of released migrations, `supabase/migrations.sha256`: one line per released file,
 * `<sha256>  <file name>` (the format of `sha256sum`, so `cd supabase/migrations && sha256sum -c
 * ../migrations.sha256` checks it too). A released migration may have run on someone's database:
 * it is never changed or removed; a change is a new migration.
 *
 * The rule (docs/upgrade.md): every migration listed is released. A migration not listed whose
 * version is later than every listed one is an unreleased draft and may still change;
 * `deno task migration:release` lists the drafts when the version ships. Any other unlisted file
 * is an error. Line endings are not part of the checksum (CRLF is read as LF).
 *
 * @module
 */
import { listMigrations, MIGRATIONS_DIR } from "./db_push.ts";

/** Default manifest of this repository. */
export const MANIFEST_PATH: string = new URL("../supabase/migrations.sha256", import.meta.url)
  .pathname;

/** One released migration. */
export interface ManifestEntry {
  file: string;
  sha256: string;
}

/** What {@link checkReleasedMigrations} found. */
export interface ReleaseCheck {
  /** One message per problem, naming the file and saying what to do. Empty when all is well. */
  problems: string[];
  /** Unlisted migrations later than every released one: unreleased drafts, free to change. */
  drafts: string[];
  /** The released files, in version order. */
  released: string[];
}

/** The SHA-256 of a migration's text, hex; CRLF line endings count as LF. */
export async function migrationChecksum(path: string): Promise<string> {
  const text = (await Deno.readTextFile(path)).replaceAll("\r\n", "\n");
  const digest = await crypto.subtle.digest("SHA-256", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Reads a manifest; a missing file is an empty manifest, a malformed line an error naming it.
 *
 * @example
 * ```ts
 * const entries = await readManifest(MANIFEST_PATH);
 * ```
 */
export async function readManifest(path: string = MANIFEST_PATH): Promise<ManifestEntry[]> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (err) {
    if (err instanceof Deno.errors.NotFound) return [];
    throw err;
  }
  const entries: ManifestEntry[] = [];
  text.replaceAll("\r\n", "\n").split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const match = /^([0-9a-f]{64}) [ *]([^/\\]+\.sql)$/.exec(line);
    if (!match) {
      throw new Error(
        `${path}:${i + 1} is not "<sha256>  <file>.sql": ${JSON.stringify(line)}; ` +
          "restore the manifest from git (deno task migration:release only adds lines)",
      );
    }
    entries.push({ sha256: match[1], file: match[2] });
  });
  return entries;
}

/** Writes a manifest, sorted by file name. */
async function writeManifest(path: string, entries: ManifestEntry[]): Promise<void> {
  const lines = [...entries].sort((a, b) => a.file.localeCompare(b.file))
    .map((e) => `${e.sha256}  ${e.file}\n`);
  await Deno.writeTextFile(path, lines.join(""));
}

/**
 * Checks the migrations folder against the manifest: every released file is there, unchanged, and
 * every unlisted file comes after the released ones.
 *
 * @example
 * ```ts
 * const { problems } = await checkReleasedMigrations();
 * if (problems.length) throw new Error(problems.join("\n"));
 * ```
 */
export async function checkReleasedMigrations(
  dir: string = MIGRATIONS_DIR,
  manifestPath: string = MANIFEST_PATH,
): Promise<ReleaseCheck> {
  const entries = await readManifest(manifestPath);
  const files = await listMigrations(dir);
  const present = new Map(files.map((f) => [`${f.version}_${f.name}.sql`, f]));
  const problems: string[] = [];
  const newMigration = "put the change in a new migration instead: deno task migration:new <name>";
  for (const entry of entries) {
    const file = present.get(entry.file);
    if (!file) {
      problems.push(
        `supabase/migrations/${entry.file} is released (listed in ${manifestName(manifestPath)}) ` +
          `but is missing: restore it (git restore supabase/migrations/${entry.file}); a released ` +
          `migration may have run on someone's database and is never removed; ${newMigration}`,
      );
      continue;
    }
    const actual = await migrationChecksum(file.path);
    if (actual !== entry.sha256) {
      problems.push(
        `supabase/migrations/${entry.file} is released and was changed (sha256 ${actual}, ` +
          `released as ${entry.sha256}): restore it (git restore supabase/migrations/${entry.file}) ` +
          `and ${newMigration}`,
      );
    }
  }
  const listed = new Set(entries.map((e) => e.file));
  const newest = entries.map((e) => e.file).sort().at(-1);
  const drafts: string[] = [];
  for (const [name] of present) {
    if (listed.has(name)) continue;
    if (newest === undefined || name > newest) {
      drafts.push(name);
    } else {
      problems.push(
        `supabase/migrations/${name} is not released (not in ${manifestName(manifestPath)}) but ` +
          `comes before the released ${newest}: a database that has the released migrations would ` +
          `never run it. Give it a version later than ${newest.split("_")[0]}, or write it again ` +
          `with deno task migration:new <name>`,
      );
    }
  }
  return {
    problems,
    drafts: drafts.sort(),
    released: entries.map((e) => e.file).filter((f) => present.has(f)).sort(),
  };
}

function manifestName(path: string): string {
  return path === MANIFEST_PATH ? "supabase/migrations.sha256" : path;
}

/**
 * Releases the drafts: adds each unreleased draft's checksum to the manifest and returns their
 * names. Refuses, changing nothing, while {@link checkReleasedMigrations} reports a problem.
 *
 * @example
 * ```ts
 * const released = await releaseDrafts(); // ["20261204090000_pgflow_error_codes.sql"]
 * ```
 */
export async function releaseDrafts(
  dir: string = MIGRATIONS_DIR,
  manifestPath: string = MANIFEST_PATH,
): Promise<string[]> {
  const check = await checkReleasedMigrations(dir, manifestPath);
  if (check.problems.length) {
    throw new Error(
      `cannot release while released migrations are wrong:\n${check.problems.join("\n")}`,
    );
  }
  if (!check.drafts.length) return [];
  const entries = await readManifest(manifestPath);
  for (const file of check.drafts) {
    entries.push({ file, sha256: await migrationChecksum(`${dir.replace(/\/$/, "")}/${file}`) });
  }
  await writeManifest(manifestPath, entries);
  return check.drafts;
}

/**
 * Writes the baseline and records it as the only released migration, with its checksum: what
 * `deno task migration:baseline` does. Refuses, writing nothing, when the folder holds any other
 * migration or the manifest lists any other file: the baseline has been built on and is frozen.
 * Returns whether the file changed.
 *
 * @example
 * ```ts
 * await writeBaseline(MIGRATIONS_DIR, MANIFEST_PATH, "20261205000000_pgflow_base.sql", text);
 * ```
 */
export async function writeBaseline(
  dir: string,
  manifestPath: string,
  file: string,
  text: string,
): Promise<boolean> {
  const others = new Set([
    ...(await listMigrations(dir)).map((m) => `${m.version}_${m.name}.sql`),
    ...(await readManifest(manifestPath)).map((e) => e.file),
  ]);
  others.delete(file);
  if (others.size) {
    throw new Error(
      `the baseline is frozen: other migrations exist (${[...others].sort().join(", ")}); ` +
        "write the next one instead: deno task migration:new <name>",
    );
  }
  const path = `${dir.replace(/\/$/, "")}/${file}`;
  const changed = await Deno.readTextFile(path).catch(() => undefined) !== text;
  if (changed) await Deno.writeTextFile(path, text);
  await writeManifest(manifestPath, [{ file, sha256: await migrationChecksum(path) }]);
  return changed;
}
