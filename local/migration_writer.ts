/**
 * Writes migrations from the schema files (`supabase/schemas/`), which are declarative and
 * re-runnable (`create or replace`, `create table if not exists`, guarded `do` blocks):
 *
 * - the baseline ({@link baselineText}): every schema file, in order, in one transaction;
 * - the next migration ({@link nextMigration}): every schema file that changes the catalog of a
 *   database built from the migrations, copied whole, in order. Copying a file does not reach what
 *   a re-runnable file cannot say (a column added to an existing table, a dropped function, a
 *   changed return type): the draft is applied on top of the migrations and what still differs
 *   from the schema files is listed, with a line diff, to write by hand.
 *
 * @module
 */
import type postgres from "postgres";
import { ENGINE_VERSION } from "../mod.ts";
import { catalogSnapshot, diffCatalogs } from "./catalog.ts";
import { applyMigrations, applySchemaFiles } from "./db_push.ts";
import { withScratchDatabase } from "./scratch_db.ts";

/** Options of {@link nextMigration}. */
export interface GenerateOptions {
  /** A server on which scratch databases may be created and dropped (never a production one). */
  serverUrl: string;
  /** The declarative schema folder (`supabase/schemas/`). */
  schemasDir: string;
  /** The migrations folder: every file in it counts, released or draft. */
  migrationsDir: string;
  /** A database with PGMQ only, cloned for each scratch database; default: install PGMQ each time. */
  pgmqTemplate?: string;
}

/** The migration {@link nextMigration} wrote. */
export interface GeneratedMigration {
  /** The copied schema files (no header); empty when the schema files and migrations agree. */
  body: string;
  /** One line per copied file, naming the objects it changes. */
  changes: string[];
  /** What is still different once the body is applied, one entry per object with a line diff. */
  byHand: string[];
}

const message = (err: unknown) => err instanceof Error ? err.message : String(err);

async function schemaFiles(dir: string): Promise<{ file: string; text: string }[]> {
  const names: string[] = [];
  for await (const e of Deno.readDir(dir)) {
    if (e.isFile && e.name.endsWith(".sql")) names.push(e.name);
  }
  return await Promise.all(
    names.sort().map(async (file) => ({
      file,
      text: await Deno.readTextFile(`${dir.replace(/\/$/, "")}/${file}`),
    })),
  );
}

const section = (file: string, text: string) => `-- ---- schemas/${file}\n${text.trimEnd()}\n`;

/**
 * The baseline migration: every schema file in order, one transaction, refusing to run where it
 * is recorded, and recording itself (the schema files create `pgflow.migrations`).
 *
 * @example
 * ```ts
 * const text = await baselineText("supabase/schemas/", "20261205000000_pgflow_base");
 * ```
 */
export async function baselineText(schemasDir: string, migration: string): Promise<string> {
  const files = await schemaFiles(schemasDir);
  const label = migration.replace(/^\d+_/, "");
  return `-- ${label}: the engine of @pgflow/shared ${ENGINE_VERSION}, every file of supabase/schemas/ in order.
-- Written by \`deno task migration:baseline\` (local/new_migration.ts): change the schema files,
-- not this file. Later releases add one migration each (docs/upgrade.md).
-- One transaction: applied whole or not at all, however it is run (psql -f, supabase db push,
-- pgflow migrate).
begin;

-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if to_regclass('pgflow.migrations') is not null then
    if exists (select 1 from pgflow.migrations m where m.name = '${migration}') then
      raise exception 'pgflow migration ${migration} is already applied to this database; nothing was changed'
        using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
    end if;
  end if;
end
$$;

${files.map((f) => section(f.file, f.text)).join("\n")}
insert into pgflow.migrations (name) values ('${migration}') on conflict (name) do nothing;

commit;
`;
}

/**
 * The next migration's body: the schema files that change a database built from the migrations,
 * each copied whole; and what is left to write by hand. Nothing outside scratch databases is
 * touched.
 *
 * @example
 * ```ts
 * const { body, byHand } = await nextMigration({
 *   serverUrl: "postgres://postgres@127.0.0.1:5432/postgres",
 *   schemasDir: "supabase/schemas/",
 *   migrationsDir: "supabase/migrations/",
 * });
 * ```
 */
export async function nextMigration(options: GenerateOptions): Promise<GeneratedMigration> {
  const files = await schemaFiles(options.schemasDir);
  const sections: string[] = [];
  const changes: string[] = [];
  const byHand: string[] = [];
  const scratch = <T>(fn: (sql: postgres.Sql) => Promise<T>) =>
    withScratchDatabase(options.serverUrl, fn, { template: options.pgmqTemplate });
  await scratch(async (sql) => {
    await applyMigrations(sql, options.migrationsDir);
    // One transaction, so each file is tried under a savepoint and all of it is taken back.
    await sql.unsafe("begin").simple();
    let before = await catalogSnapshot(sql, "pgflow");
    for (const { file, text } of files) {
      await sql.unsafe("savepoint file").simple();
      try {
        await sql.unsafe(text).simple();
      } catch (err) {
        await sql.unsafe("rollback to savepoint file").simple();
        sections.push(section(file, text));
        changes.push(`schemas/${file}: does not apply as it is`);
        byHand.push(
          `schemas/${file} fails on a database with the migrations (${message(err)}): write ` +
            "what it needs before its copy (a drop of a function whose return type or parameter " +
            "names changed, say)",
        );
        continue;
      }
      const after = await catalogSnapshot(sql, "pgflow");
      const changed = diffCatalogs(after, before, "", "").map((d) => d.slice(0, d.indexOf(": ")));
      if (changed.length) {
        sections.push(section(file, text));
        changes.push(`schemas/${file}: ${changed.join(", ")}`);
      }
      before = after;
    }
    await sql.unsafe("rollback").simple();
  });
  const body = sections.join("\n");
  if (!body) return { body, changes, byHand };
  // The draft as written, on top of the migrations, compared with the schema files.
  const dir = await Deno.makeTempDir({ prefix: "pgflow-next-migration-" });
  try {
    for await (const e of Deno.readDir(options.migrationsDir)) {
      if (e.isFile && e.name.endsWith(".sql")) {
        await Deno.copyFile(
          `${options.migrationsDir.replace(/\/$/, "")}/${e.name}`,
          `${dir}/${e.name}`,
        );
      }
    }
    await Deno.writeTextFile(`${dir}/99999999999999_next.sql`, withHeader("next", body, [], []));
    const [declared, migrated] = await Promise.all([
      scratch(async (sql) => {
        await applySchemaFiles(sql, options.schemasDir);
        return await catalogSnapshot(sql, "pgflow");
      }),
      scratch(async (sql) => {
        await applyMigrations(sql, dir);
        return await catalogSnapshot(sql, "pgflow");
      }).catch((err) => message(err)),
    ]);
    if (typeof migrated === "string") {
      if (!byHand.length) byHand.push(`the written migration does not apply: ${migrated}`);
    } else {
      byHand.push(...diffCatalogs(declared, migrated, "schemas", "migrations"));
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  return { body, changes, byHand };
}

/**
 * A migration's whole text: a header saying what changed and what is left to write, `begin;`, a
 * guard that refuses a recorded migration (when `migration`, its name, is given), a 5 s lock
 * timeout, the body, the record of itself, `commit;` (docs/upgrade.md).
 *
 * @example
 * ```ts
 * const text = withHeader("pgflow_retention", body, changes, [], "20270101000000_pgflow_retention");
 * ```
 */
export function withHeader(
  name: string,
  body: string,
  changes: string[],
  byHand: string[],
  migration?: string,
): string {
  const lines = [
    `-- ${name}: written by \`deno task migration:new\` from the schema files that differ from the`,
    "-- migrations before it. Say here what it changes and why, what it does to existing data, and",
    "-- how long it locks what (docs/upgrade.md).",
  ];
  if (changes.length) lines.push("--", "-- Changes:", ...changes.map((c) => `-- - ${c}`));
  if (byHand.length) {
    lines.push(
      "--",
      "-- TO WRITE BY HAND (the drift check fails until this file has them):",
      ...byHand.flatMap((c) => c.split("\n")).map((c) => `-- ${c}`),
    );
  }
  const guard = migration === undefined ? "" : `
-- Runs once: a database that records this migration already has it, and running it again would
-- undo what later migrations changed.
do $$
begin
  if exists (select 1 from pgflow.migrations m where m.name = '${migration}') then
    raise exception 'pgflow migration ${migration} is already applied to this database; nothing was changed'
      using hint = 'if supabase db push applies it again, mark the project''s copy as applied: supabase migration repair --status applied <its version>';
  end if;
end
$$;
`;
  const record = migration === undefined
    ? ""
    : `\ninsert into pgflow.migrations (name) values ('${migration}') on conflict (name) do nothing;\n`;
  return `${
    lines.join("\n")
  }\nbegin;\n${guard}\nset local lock_timeout = '5s';\n\n${body}${record}\ncommit;\n`;
}
