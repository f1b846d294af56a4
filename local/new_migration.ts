/**
 * `deno task migration:new NAME`: writes `supabase/migrations/<timestamp>_NAME.sql` from the
 * declarative schema files (all of them, in file-name order). Use it for the first release of a
 * schema; later releases are written as deltas and checked against the schema files by the
 * schema-first test. Released migrations are never edited.
 *
 * @module
 */
const name = Deno.args[0];
if (!name || !/^[a-z0-9_]+$/.test(name)) {
  console.error("usage: deno task migration:new <lowercase_name>");
  Deno.exit(2);
}
const schemasDir = new URL("../supabase/schemas/", import.meta.url);
const files = [...Deno.readDirSync(schemasDir)].map((e) => e.name).filter((n) => n.endsWith(".sql"))
  .sort();
const parts = files.map((f) =>
  `-- ---- schemas/${f}\n${Deno.readTextFileSync(new URL(f, schemasDir))}`
);
const stamp = new Date().toISOString().replace(/\D/g, "").slice(0, 14);
const out = new URL(`../supabase/migrations/${stamp}_${name}.sql`, import.meta.url);
Deno.writeTextFileSync(
  out,
  `-- Generated from supabase/schemas/ by local/new_migration.ts.\n\n${parts.join("\n")}`,
);
console.log(out.pathname);
