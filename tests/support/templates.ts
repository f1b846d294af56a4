/**
 * Builds the template databases every test database is cloned from, once per test run:
 * `pgflow_tpl_pgmq` (PGMQ only) and `pgflow_tpl` (PGMQ plus every migration).
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq, type PgmqSource } from "../../local/install_pgmq.ts";
import { applyMigrations } from "../../local/migrate.ts";

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

/**
 * Drops and rebuilds both templates on the server behind `adminUrl`; returns how PGMQ was provided.
 *
 * @example
 * ```ts
 * const source = await prepareTemplates("postgres://postgres@127.0.0.1:5432/postgres");
 * ```
 */
export async function prepareTemplates(adminUrl: string): Promise<PgmqSource> {
  const admin = postgres(adminUrl, { max: 1, onnotice: () => {} });
  try {
    await recreate(admin, TEMPLATES.pgmq, "template0");
    const pgmqDb = postgres(withDatabase(adminUrl, TEMPLATES.pgmq), { max: 1, onnotice: () => {} });
    let source: PgmqSource;
    try {
      source = await installPgmq(pgmqDb);
    } finally {
      await pgmqDb.end();
    }
    await recreate(admin, TEMPLATES.pgflow, TEMPLATES.pgmq);
    const flowDb = postgres(withDatabase(adminUrl, TEMPLATES.pgflow), {
      max: 1,
      onnotice: () => {},
    });
    try {
      await applyMigrations(flowDb);
    } finally {
      await flowDb.end();
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
