/**
 * One engine version: deno.json's `version`, `ENGINE_VERSION` (what workers are built for), the
 * schema file's `pgflow.engine_version()` and the migrated database's are the same. The record
 * table the migration runner creates first is exactly the one the baseline migration and its
 * schema file declare.
 */
import assert from "node:assert/strict";
import { RECORD_TABLE_DDL } from "../../src/cli/migration_runner.ts";
import { ENGINE_VERSION } from "../../src/util/version.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);
const read = (path: string) => Deno.readTextFileSync(new URL(`../../${path}`, import.meta.url));
const BASELINE = [...Deno.readDirSync(new URL("../../supabase/migrations/", import.meta.url))]
  .map((e) => e.name).filter((n) => n.endsWith(".sql")).sort()[0];

Deno.test("deno.json, ENGINE_VERSION and the schema file name one version", () => {
  assert.equal(JSON.parse(read("deno.json")).version, ENGINE_VERSION);
  const schema = read("supabase/schemas/0015_engine_version.sql");
  assert.match(schema, new RegExp(`select '${ENGINE_VERSION.replaceAll(".", "\\.")}'::text`));
});

db.test("the migrations set the same version (a release bumping it needs a migration)", async ({ sql }) => {
  const [{ version }] = await sql`select pgflow.engine_version() as version`;
  assert.equal(
    version,
    ENGINE_VERSION,
    `the migrations set ${version}, deno.json says ${ENGINE_VERSION}: add a migration that sets ` +
      "pgflow.engine_version() (and supabase/schemas/0015_engine_version.sql) to the new version",
  );
});

Deno.test("the runner's record table is the baseline's and the schema file's", () => {
  assert.ok(read(`supabase/migrations/${BASELINE}`).includes(RECORD_TABLE_DDL));
  assert.ok(read("supabase/schemas/0015_engine_version.sql").includes(RECORD_TABLE_DDL));
});
