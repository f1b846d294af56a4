/**
 * Applies `supabase/migrations/*.sql` in version order, one transaction per file, and records each
 * applied version in `supabase_migrations.schema_migrations` (the table the Supabase CLI uses), so a
 * second run applies only what is new.
 *
 * @module
 */
import type { Sql } from "postgres";

/** Default migrations folder of this repository. */
export const MIGRATIONS_DIR: string = new URL("../supabase/migrations/", import.meta.url).pathname;

/** One migration file. */
export interface MigrationFile {
  version: string;
  name: string;
  path: string;
}

/** Raised when a migration fails; names the file and keeps the database's own error as cause. */
export class MigrationError extends Error {
  constructor(readonly file: string, cause: unknown) {
    super(`migration ${file} failed: ${cause instanceof Error ? cause.message : String(cause)}`, {
      cause,
    });
    this.name = "MigrationError";
  }
}

/**
 * Lists the migration files of a folder in the order they apply. File names must look like
 * `<digits>_<name>.sql`; anything else is an error rather than silently skipped.
 *
 * @example
 * ```ts
 * const files = await listMigrations(MIGRATIONS_DIR);
 * ```
 */
export async function listMigrations(dir: string): Promise<MigrationFile[]> {
  const files: MigrationFile[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (!entry.isFile || !entry.name.endsWith(".sql")) continue;
    const match = /^(\d+)_([a-z0-9_]+)\.sql$/.exec(entry.name);
    if (!match) {
      throw new Error(
        `migration file name ${entry.name} is not <digits>_<lowercase_name>.sql; rename it`,
      );
    }
    files.push({
      version: match[1],
      name: match[2],
      path: `${dir.replace(/\/$/, "")}/${entry.name}`,
    });
  }
  files.sort((a, b) => a.version.localeCompare(b.version));
  for (let i = 1; i < files.length; i++) {
    if (files[i].version === files[i - 1].version) {
      throw new Error(`two migrations share version ${files[i].version}: give each its own`);
    }
  }
  return files;
}

/**
 * Applies every migration not yet recorded and returns the versions it applied. Stops at the first
 * failure, which is rolled back, and throws a {@link MigrationError} naming the file.
 *
 * @example
 * ```ts
 * const applied = await applyMigrations(sql); // ["20261202000000", ...]
 * ```
 */
export async function applyMigrations(sql: Sql, dir: string = MIGRATIONS_DIR): Promise<string[]> {
  await sql.unsafe(`
    create schema if not exists supabase_migrations;
    create table if not exists supabase_migrations.schema_migrations (
      version text primary key,
      name text,
      statements text[]
    );`).simple();
  const applied = new Set(
    (await sql<{ version: string }[]>`select version from supabase_migrations.schema_migrations`)
      .map((r) => r.version),
  );
  const done: string[] = [];
  for (const file of await listMigrations(dir)) {
    if (applied.has(file.version)) continue;
    const text = await Deno.readTextFile(file.path);
    try {
      await sql.begin(async (tx) => {
        await tx.unsafe(text).simple();
        await tx`insert into supabase_migrations.schema_migrations (version, name)
                 values (${file.version}, ${file.name})`;
      });
    } catch (err) {
      throw new MigrationError(`${file.version}_${file.name}.sql`, err);
    }
    done.push(file.version);
  }
  return done;
}

/**
 * Applies the declarative schema files (`supabase/schemas/*.sql`) in file-name order, each in its
 * own transaction. Used to compare the declared catalog with the migrated one.
 *
 * @example
 * ```ts
 * await applySchemaFiles(sql, new URL("../supabase/schemas/", import.meta.url).pathname);
 * ```
 */
export async function applySchemaFiles(sql: Sql, dir: string): Promise<void> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) {
    if (entry.isFile && entry.name.endsWith(".sql")) names.push(entry.name);
  }
  names.sort();
  for (const name of names) {
    const text = await Deno.readTextFile(`${dir.replace(/\/$/, "")}/${name}`);
    try {
      await sql.begin((tx) => tx.unsafe(text).simple());
    } catch (err) {
      throw new MigrationError(`schemas/${name}`, err);
    }
  }
}
