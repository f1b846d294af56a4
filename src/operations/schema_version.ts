/**
 * The engine version a database records (`pgflow.engine_version()`), and what to do when it is not
 * the one the code was built for. Read by the worker at startup and by `pgflow status`.
 *
 * @module
 */
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Sql } from "../platform/types.ts";
import { compareVersions, ENGINE_VERSION } from "../util/version.ts";

/**
 * What a database says about its engine schema: no `pgflow` schema at all, a `pgflow` schema
 * without a recorded version (built before versioned migrations, or by a half-applied install), or
 * the recorded version.
 *
 * @example
 * ```ts
 * import type { SchemaVersion } from "./schema_version.ts";
 *
 * const found: SchemaVersion = { kind: "versioned", version: "0.1.0" };
 * ```
 */
export type SchemaVersion =
  | { readonly kind: "missing" }
  | { readonly kind: "unversioned" }
  | { readonly kind: "versioned"; readonly version: string };

/**
 * Reads the database's engine version: two catalog reads and, when the function exists,
 * `pgflow.engine_version()`. Each call is bounded by `timeoutMs`.
 *
 * @example
 * ```ts
 * import { createPool } from "../platform/pool.ts";
 * import { readSchemaVersion } from "./schema_version.ts";
 *
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres", { max: 1 });
 * // const found = await readSchemaVersion(sql); // { kind: "versioned", version: "0.1.0" }
 * ```
 */
export async function readSchemaVersion(
  sql: Sql,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<SchemaVersion> {
  const [row] = await bounded(
    sql<{ schema: boolean; versioned: boolean }[]>`
      select exists (select 1 from pg_catalog.pg_namespace where nspname = 'pgflow') as schema,
             exists (select 1 from pg_catalog.pg_proc p
                     join pg_catalog.pg_namespace n on n.oid = p.pronamespace
                     where n.nspname = 'pgflow' and p.proname = 'engine_version'
                       and p.pronargs = 0) as versioned`,
    "engine version lookup",
    timeoutMs,
  );
  if (!row.schema) return { kind: "missing" };
  if (!row.versioned) return { kind: "unversioned" };
  const [{ version }] = await bounded(
    sql<{ version: string }[]>`select pgflow.engine_version() as version`,
    "pgflow.engine_version",
    timeoutMs,
  );
  return { kind: "versioned", version };
}

/**
 * The command line that runs a CLI command of the given release (`deno run -A jsr:…/cli …`).
 *
 * @example
 * ```ts
 * import { cliCommand } from "./schema_version.ts";
 *
 * cliCommand("migrate"); // "deno run -A jsr:@pgflow/shared@0.1.0/cli migrate"
 * ```
 */
export function cliCommand(command: string, version: string = ENGINE_VERSION): string {
  return `deno run -A jsr:@pgflow/shared@${version}/cli ${command}`;
}

/** How to apply the migrations of `version`, on Supabase and elsewhere. */
function applyHint(version: string): string {
  return `on a Supabase project run \`${cliCommand("install", version)}\` then ` +
    `\`supabase db push\` (Supabase CLI 3: \`supabase db push --remote\`); on any other Postgres run \`${
      cliCommand("migrate --database-url <url>", version)
    }\``;
}

/**
 * Says what is wrong when the database's schema is not the one `expected` (default: this code's
 * {@link ENGINE_VERSION}), naming both versions and the command to run; `undefined` when they
 * match.
 *
 * @example
 * ```ts
 * import { schemaVersionProblem } from "./schema_version.ts";
 *
 * schemaVersionProblem({ kind: "versioned", version: "0.1.0" }, "0.1.0"); // undefined
 * schemaVersionProblem({ kind: "missing" }, "0.1.0"); // "this database has no pgflow schema …"
 * ```
 */
export function schemaVersionProblem(
  found: SchemaVersion,
  expected: string = ENGINE_VERSION,
): string | undefined {
  switch (found.kind) {
    case "missing":
      return `this database has no pgflow schema (database: none; this code: engine ` +
        `${expected}): the engine's migrations were never applied. Apply them: ` +
        `${applyHint(expected)}`;
    case "unversioned":
      return `this database's pgflow schema records no engine version (database: older than ` +
        `0.1.0 or half-applied; this code: engine ${expected}). Apply the missing migrations: ` +
        `${applyHint(expected)}`;
    case "versioned": {
      let order: number;
      try {
        order = compareVersions(found.version, expected);
      } catch {
        order = Number.NaN;
      }
      if (order === 0) return undefined;
      if (order < 0) {
        return `this database's pgflow schema is engine ${found.version}, older than this ` +
          `code's engine ${expected}. Apply the migrations of ${expected}: ${applyHint(expected)}`;
      }
      if (order > 0) {
        return `this database's pgflow schema is engine ${found.version}, newer than this ` +
          `code's engine ${expected}. Deploy workers built with @pgflow/shared ${found.version} ` +
          `(import jsr:@pgflow/shared@${found.version}) instead of downgrading the database`;
      }
      return `this database's pgflow schema reports engine ${
        JSON.stringify(found.version)
      }, which is not a version (this code: engine ${expected}); the schema was changed by ` +
        `hand. Restore pgflow.engine_version() by applying the migrations: ${applyHint(expected)}`;
    }
  }
}
