/** The migration runner: order, recording, re-runs and loud failures that name the file. */
import assert from "node:assert/strict";
import { applyMigrations, listMigrations, MigrationError } from "../../local/db_push.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

async function migrationsDir(files: Record<string, string>): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-migrations-" });
  for (const [name, text] of Object.entries(files)) {
    await Deno.writeTextFile(`${dir}/${name}`, text);
  }
  return dir;
}

db.test("applies files in version order and records each version once", async ({ sql }) => {
  const dir = await migrationsDir({
    "20260102000000_second.sql": "insert into m_log values ('second');",
    "20260101000000_first.sql":
      "create table m_log (what text); insert into m_log values ('first');",
  });
  assert.deepEqual(await applyMigrations(sql, dir), ["20260101000000", "20260102000000"]);
  assert.deepEqual(await applyMigrations(sql, dir), [], "a second run applies nothing");
  const log = await sql`select what from m_log`;
  assert.deepEqual(log.map((r) => r.what), ["first", "second"]);
  const recorded =
    await sql`select version, name from supabase_migrations.schema_migrations order by version`;
  assert.deepEqual(recorded.map((r) => `${r.version}_${r.name}`), [
    "20260101000000_first",
    "20260102000000_second",
  ]);
  await Deno.remove(dir, { recursive: true });
});

db.test("a failing migration names its file and rolls back completely", async ({ sql }) => {
  const dir = await migrationsDir({
    "20260201000000_ok.sql": "create table m_ok (i int);",
    "20260202000000_broken.sql": "create table m_half (i int); select 1/0;",
    "20260203000000_later.sql": "create table m_later (i int);",
  });
  await assert.rejects(() => applyMigrations(sql, dir), (err: unknown) => {
    assert.ok(err instanceof MigrationError);
    assert.equal(err.file, "20260202000000_broken.sql");
    assert.match(err.message, /20260202000000_broken\.sql failed: division by zero/);
    return true;
  });
  const [{ ok, half, later }] = await sql`
    select to_regclass('m_ok') is not null as ok, to_regclass('m_half') is not null as half,
           to_regclass('m_later') is not null as later`;
  assert.deepEqual([ok, half, later], [true, false, false]);
  const versions = await sql`select version from supabase_migrations.schema_migrations
                             where version like '202602%'`;
  assert.deepEqual(versions.map((r) => r.version), ["20260201000000"]);
  await Deno.remove(dir, { recursive: true });
});

db.test("badly named files and duplicate versions are errors", async () => {
  const bad = await migrationsDir({ "init.sql": "select 1;" });
  await assert.rejects(
    () => listMigrations(bad),
    /init\.sql is not <digits>_<lowercase_name>\.sql/,
  );
  const dup = await migrationsDir({ "1_a.sql": "select 1;", "1_b.sql": "select 1;" });
  await assert.rejects(() => listMigrations(dup), /two migrations share version 1/);
  await Deno.remove(bad, { recursive: true });
  await Deno.remove(dup, { recursive: true });
});
