/**
 * Builds the template databases every test database is cloned from, once per test run:
 * `pgflow_tpl_pgmq` (PGMQ only) and `pgflow_tpl` (PGMQ plus every migration). The migrations are
 * what users get, so the behaviour tests run on them; and so that they run on the schema files
 * too, the build refuses, before any test runs, when the schema files build a different catalog
 * (`local/drift.ts`), printing a line diff and the command that fixes it.
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq, type PgmqSource } from "../../src/cli/db/pgmq.ts";
import { driftReport, schemaDrift } from "../../local/drift.ts";
import { applyMigrations, MIGRATIONS_DIR } from "../../local/db_push.ts";

/** Template names by what they hold. */
export const TEMPLATES = { pgmq: "pgflow_tpl_pgmq", pgflow: "pgflow_tpl" } as const;

/** Which template a test database starts from; `empty` is Postgres's own `template0`. */
export type TemplateKind = keyof typeof TEMPLATES | "empty";

/** Replaces the database name in a connection URL. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

async function recreate(admin: postgres.Sql, name: string, template: string): Promise<void> {
  await admin.unsafe(`drop database if exists ${name} with (force)`);
  await admin.unsafe(`create database ${name} template ${template}`);
}

/** Options of {@link prepareTemplates}; the defaults are this repository's and {@link TEMPLATES}. */
export interface TemplateOptions {
  names?: { pgmq: string; pgflow: string };
  schemasDir?: string;
  migrationsDir?: string;
}

/**
 * Drops and rebuilds both templates on the server behind `adminUrl`; returns how PGMQ was provided.
 * Throws, naming every object that differs and the command that fixes it, when the schema files
 * and the migrations build different catalogs.
 *
 * @example
 * ```ts
 * const source = await prepareTemplates("postgres://postgres@127.0.0.1:5432/postgres");
 * ```
 */
export async function prepareTemplates(
  adminUrl: string,
  options: TemplateOptions = {},
): Promise<PgmqSource> {
  const names = options.names ?? TEMPLATES;
  const migrationsDir = options.migrationsDir ?? MIGRATIONS_DIR;
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await recreate(admin, names.pgmq, "template0");
    const pgmqDb = postgres(withDatabase(adminUrl, names.pgmq), { max: 1, onnotice: () => {} });
    let source: PgmqSource;
    try {
      source = await installPgmq(pgmqDb);
    } finally {
      await pgmqDb.end();
    }
    await recreate(admin, names.pgflow, names.pgmq);
    const flowDb = postgres(withDatabase(adminUrl, names.pgflow), {
      max: 1,
      onnotice: () => {},
    });
    try {
      await applyMigrations(flowDb, migrationsDir);
    } finally {
      await flowDb.end();
    }
    const drift = await schemaDrift({
      serverUrl: adminUrl,
      schemasDir: options.schemasDir,
      pgmqTemplate: names.pgmq,
      migratedTemplate: names.pgflow,
    });
    if (drift.length) {
      throw new Error(`no test ran: ${await driftReport(drift, migrationsDir)}`);
    }
    return source;
  } finally {
    await admin.end();
  }
}

/**
 * Drops the per-file test databases a run left behind (they all start with `t_`).
 *
 * @example
 * ```ts
 * await dropTestDatabases(adminUrl);
 * ```
 */
export async function dropTestDatabases(adminUrl: string): Promise<void> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    const rows = await admin<{ datname: string }[]>`
      select datname from pg_database where datname like 't\\_%' or datname like 'pgflow\\_tpl%'`;
    for (const { datname } of rows) {
      await admin.unsafe(`drop database if exists "${datname}" with (force)`);
    }
  } finally {
    await admin.end();
  }
}
