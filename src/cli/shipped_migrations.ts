/**
 * The engine's migrations as this module ships them: the released ones from the checksum manifest
 * (`supabase/migrations.sha256`, `<sha256>  <file>` per line, the format `sha256sum` writes), plus,
 * when running from a checkout, the unreleased drafts after them. Texts are read by URL and checked
 * against their checksum.
 *
 * @module
 */
import { CliError } from "./output.ts";
import { isLocalModule, packagedUrl, readPackagedText } from "./packaged.ts";

/** The manifest of released migrations, from the module's root. */
export const MANIFEST = "supabase/migrations.sha256";
/** The migrations folder, from the module's root. */
export const MIGRATIONS = "supabase/migrations/";

/**
 * One migration of the engine.
 *
 * @example
 * ```ts
 * import type { EngineMigration } from "./shipped_migrations.ts";
 *
 * const m: EngineMigration = {
 *   file: "20261205001154_pgflow_base.sql",
 *   name: "20261205001154_pgflow_base",
 *   label: "pgflow_base",
 *   sha256: undefined,
 * };
 * ```
 */
export interface EngineMigration {
  /** The file name in `supabase/migrations/`. */
  readonly file: string;
  /** The file name without `.sql`: what `pgflow.migrations` records. */
  readonly name: string;
  /** The name without its timestamp (`pgflow_base`): how an installed copy is recognised. */
  readonly label: string;
  /** The released checksum; `undefined` for an unreleased draft of a checkout. */
  readonly sha256: string | undefined;
}

const FILE = /^(\d{14})_([a-z0-9_]+)\.sql$/;

function entry(file: string, sha256: string | undefined): EngineMigration {
  const match = FILE.exec(file);
  if (!match) {
    throw new CliError(`migration file name ${file} is not <14 digits>_<lowercase_name>.sql`);
  }
  return { file, name: file.slice(0, -4), label: match[2], sha256 };
}

/**
 * Parses the manifest's text; a malformed line is an error naming it.
 *
 * @example
 * ```ts
 * import { parseManifest } from "./shipped_migrations.ts";
 *
 * parseManifest(`${"0".repeat(64)}  20261205001154_pgflow_base.sql\n`).length; // 1
 * ```
 */
export function parseManifest(text: string): EngineMigration[] {
  const out: EngineMigration[] = [];
  text.replaceAll("\r\n", "\n").split("\n").forEach((line, i) => {
    if (line.trim() === "") return;
    const match = /^([0-9a-f]{64}) [ *]([^/\\]+\.sql)$/.exec(line);
    if (!match) {
      throw new CliError(`${MANIFEST}:${i + 1} is not "<sha256>  <file>.sql": ${line}`);
    }
    out.push(entry(match[2], match[1]));
  });
  return out.sort((a, b) => a.file.localeCompare(b.file));
}

/**
 * Lists the engine's migrations in the order they apply: the released ones, then (from a checkout
 * only) the drafts later than all of them.
 *
 * @example
 * ```ts
 * import { engineMigrations } from "./shipped_migrations.ts";
 *
 * const all = await engineMigrations();
 * console.log(all.at(-1)?.name);
 * ```
 */
export async function engineMigrations(): Promise<EngineMigration[]> {
  const released = parseManifest(await readPackagedText(MANIFEST));
  if (!isLocalModule()) return released;
  const listed = new Set(released.map((m) => m.file));
  const newest = released.at(-1)?.file ?? "";
  const drafts: EngineMigration[] = [];
  for await (const e of Deno.readDir(packagedUrl(MIGRATIONS))) {
    if (!e.isFile || !e.name.endsWith(".sql") || listed.has(e.name)) continue;
    if (e.name < newest) {
      throw new CliError(
        `${MIGRATIONS}${e.name} is not in ${MANIFEST} but comes before the released ${newest}; ` +
          `give it a later version (see docs/upgrade.md)`,
      );
    }
    drafts.push(entry(e.name, undefined));
  }
  return [...released, ...drafts.sort((a, b) => a.file.localeCompare(b.file))];
}

/**
 * The SHA-256 of a migration's text, hex, with CRLF read as LF (as the manifest is written).
 *
 * @example
 * ```ts
 * import { sha256 } from "./shipped_migrations.ts";
 *
 * console.log((await sha256("select 1;\n")).length); // 64
 * ```
 */
export async function sha256(text: string): Promise<string> {
  const bytes = new TextEncoder().encode(text.replaceAll("\r\n", "\n"));
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * Reads a migration's text and checks it against its released checksum.
 *
 * @example
 * ```ts
 * import { engineMigrations, migrationText } from "./shipped_migrations.ts";
 *
 * const [base] = await engineMigrations();
 * const text = await migrationText(base);
 * ```
 */
export async function migrationText(migration: EngineMigration): Promise<string> {
  const text = await readPackagedText(`${MIGRATIONS}${migration.file}`);
  if (migration.sha256 !== undefined && await sha256(text) !== migration.sha256) {
    throw new CliError(
      `${MIGRATIONS}${migration.file} does not match its checksum in ${MANIFEST}: this copy of ` +
        `@pgflow/shared is damaged or was edited; use the published module ` +
        `(jsr:@pgflow/shared/cli)`,
    );
  }
  return text;
}

/**
 * The statements of a migration without its own `begin;` and `commit;` lines, for a runner that
 * opens the transaction itself. An engine migration is one transaction: its first statement is
 * `begin;` and its last `commit;`, each alone on a line (so `psql -f` applies it whole). A file
 * without either line is taken as it is; one with only one of them, or with a transaction line
 * anywhere else, is an error naming the file.
 *
 * @example
 * ```ts
 * import { migrationBody } from "./shipped_migrations.ts";
 *
 * migrationBody("-- x\nbegin;\nselect 1;\ncommit;\n", "x.sql"); // "select 1;"
 * ```
 */
export function migrationBody(text: string, file: string): string {
  const lines = text.replaceAll("\r\n", "\n").split("\n");
  const control = (l: string) => /^\s*(begin|commit|rollback|start transaction)\s*;\s*$/i.test(l);
  const isCode = (l: string) => l.trim() !== "" && !l.trimStart().startsWith("--");
  const first = lines.findIndex(isCode);
  const last = lines.findLastIndex(isCode);
  const wrapped = first >= 0 && /^begin;$/i.test(lines[first].trim()) &&
    /^commit;$/i.test(lines[last].trim());
  const inner = wrapped ? lines.slice(first + 1, last) : lines;
  // plpgsql bodies write `begin` without a semicolon and never commit, so a line like these is
  // always a transaction statement of the file itself.
  const stray = inner.find(control);
  if (stray !== undefined) {
    throw new CliError(
      `migration ${file} is not one transaction: it has ${JSON.stringify(stray.trim())} where ` +
        'only its first line may be "begin;" and its last "commit;"; it cannot be applied safely',
    );
  }
  return inner.join("\n").trim();
}
