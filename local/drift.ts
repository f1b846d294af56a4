/**
 * The drift check: the schema files (`supabase/schemas/`, the source of truth) and the migrations
 * (what users apply) must build the same `pgflow` catalog. Each side is built in a scratch
 * database, both catalogs are read (`local/catalog.ts`), and every object that differs is named,
 * with a line diff. The test runner refuses to build its templates on drift
 * (`tests/support/templates.ts`), so no behaviour test runs on migrations that are not the schema.
 *
 * @module
 */
import { type CatalogSnapshot, catalogSnapshot, diffCatalogs } from "./catalog.ts";
import { applyMigrations, applySchemaFiles, listMigrations, MIGRATIONS_DIR } from "./db_push.ts";
import { withScratchDatabase } from "./scratch_db.ts";

/** Default schema folder of this repository. */
export const SCHEMAS_DIR: string = new URL("../supabase/schemas/", import.meta.url).pathname;

/** Options of {@link schemaDrift}. */
export interface DriftOptions {
  /** A server on which scratch databases may be created and dropped (never a production one). */
  serverUrl: string;
  /** Default: this repository's `supabase/schemas/`. */
  schemasDir?: string;
  /** Default: this repository's `supabase/migrations/`. Not read when `migratedTemplate` is given. */
  migrationsDir?: string;
  /** A database holding PGMQ only, cloned for each side; default: PGMQ is installed each time. */
  pgmqTemplate?: string;
  /** A database already built from the migrations (no other connection to it), read as is. */
  migratedTemplate?: string;
}

function catalogOf(
  serverUrl: string,
  template: string | undefined,
  build: (sql: Parameters<typeof catalogSnapshot>[0]) => Promise<unknown>,
): Promise<CatalogSnapshot> {
  return withScratchDatabase(serverUrl, async (sql) => {
    await build(sql);
    return await catalogSnapshot(sql, "pgflow");
  }, { template });
}

/**
 * Every difference between the catalog the schema files build and the one the migrations build,
 * one entry per object (`<kind> <name>: differs|only in schemas|only in migrations`, then a line
 * diff); empty when they agree.
 *
 * @example
 * ```ts
 * const drift = await schemaDrift({ serverUrl: "postgres://postgres@127.0.0.1:5432/postgres" });
 * if (drift.length) console.error(await driftReport(drift));
 * ```
 */
export async function schemaDrift(options: DriftOptions): Promise<string[]> {
  const [declared, migrated] = await Promise.all([
    catalogOf(
      options.serverUrl,
      options.pgmqTemplate,
      (sql) => applySchemaFiles(sql, options.schemasDir ?? SCHEMAS_DIR),
    ),
    options.migratedTemplate
      ? catalogOf(options.serverUrl, options.migratedTemplate, () => Promise.resolve())
      : catalogOf(
        options.serverUrl,
        options.pgmqTemplate,
        (sql) => applyMigrations(sql, options.migrationsDir ?? MIGRATIONS_DIR),
      ),
  ]);
  return diffCatalogs(declared, migrated, "schemas", "migrations");
}

/**
 * What to print on drift: how many objects differ, the command that closes the gap (the baseline
 * command while the baseline is the only migration, else `migration:new`), then each difference.
 *
 * @example
 * ```ts
 * throw new Error(await driftReport(drift));
 * ```
 */
export async function driftReport(
  drift: string[],
  migrationsDir: string = MIGRATIONS_DIR,
): Promise<string> {
  const onlyBaseline = (await listMigrations(migrationsDir)).length <= 1;
  const fix = onlyBaseline
    ? "deno task migration:baseline (rewrites the 0.1.0 baseline; only until 0.1.0 is published) " +
      "or, after that, deno task migration:new <name>"
    : "deno task migration:new <name> (writes the next migration; or fix the unreleased draft)";
  return `supabase/schemas/ and supabase/migrations/ build different databases ` +
    `(${drift.length} object(s) differ): run ${fix}\n${drift.join("\n")}`;
}
