/**
 * The declarative schema (`supabase/schemas/`) is the source of truth: the released migrations,
 * applied in order, must produce exactly the same catalog.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { applySchemaFiles } from "../../local/migrate.ts";
import { catalogSnapshot, diffCatalogs } from "../support/catalog.ts";
import { testDatabase } from "../support/db.ts";

const SCHEMAS_DIR = new URL("../../supabase/schemas/", import.meta.url).pathname;
const pgmqOnly = testDatabase(import.meta.url, { template: "pgmq" });
const migrated = testDatabase(import.meta.url, { template: "pgflow" });

let fromMigrations: Map<string, string> | undefined;

migrated.test("snapshot of the migrated catalog", async ({ sql }) => {
  fromMigrations = await catalogSnapshot(sql, "pgflow");
});

pgmqOnly.test("schemas and migrations produce the same pgflow catalog", async ({ sql }) => {
  assert.ok(fromMigrations, "the migrated snapshot test runs first");
  await applySchemaFiles(sql, SCHEMAS_DIR);
  const fromSchemas = await catalogSnapshot(sql, "pgflow");
  const drift = diffCatalogs(fromSchemas, fromMigrations, "schemas", "migrations");
  assert.deepEqual(drift, [], `schema drift:\n${drift.join("\n")}`);
});

pgmqOnly.test("a drift is reported with the object's name", async ({ url }) => {
  const sql = postgres(url, { max: 1, onnotice: () => {} });
  try {
    await sql.unsafe(`create schema drift_a; create schema drift_b;
      create table drift_a.t (id int primary key, note text);
      create table drift_b.t (id int primary key, note varchar(10));
      create function drift_a.f() returns int language sql as 'select 1';`).simple();
    const a = await catalogSnapshot(sql, "drift_a");
    const b = await catalogSnapshot(sql, "drift_b");
    const renamed = new Map([...b].map(([k, v]) => [k.replace("drift_b.", "drift_a."), v]));
    const drift = diffCatalogs(a, renamed, "schemas", "migrations");
    assert.ok(drift.some((d) => d.startsWith("column drift_a.t.note: differs")), drift.join("\n"));
    assert.ok(
      drift.some((d) => d.startsWith("function drift_a.f(): only in schemas")),
      drift.join("\n"),
    );
  } finally {
    await sql.end();
  }
});
