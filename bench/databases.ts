/**
 * Fresh databases for the headline cells: one template prepared once per run (PGMQ, every
 * migration, the cells' flows compiled, graphile-worker's schema installed, nothing run), and a
 * new database cloned from it for each cell, dropped after. Cloning keeps a fresh cell quick and
 * identical for every engine: empty tables, no statistics, nothing vacuumed.
 */
import postgres from "postgres";
import { runMigrations } from "graphile-worker";
import { Logger } from "graphile-worker";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { type CompilableFlow, ensureFlowCompiled } from "../tools.ts";
import { applyMigrations } from "../local/db_push.ts";

const quiet = { onnotice: () => {} };

/** `url` with its database name replaced. */
export function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

/** The template of a run, on the server behind `serverUrl`. */
export interface Template {
  readonly serverUrl: string;
  readonly name: string;
  /** Drops the template. */
  drop(): Promise<void>;
}

/**
 * Creates the template database: PGMQ, the migrations, `flows` compiled, the raw `queues`
 * created, graphile-worker's schema. `local` marks it for in-place recompiles, as openPgflowDatabase does for a local server.
 */
export async function createTemplate(
  serverUrl: string,
  flows: readonly CompilableFlow[],
  queues: readonly string[],
  local: boolean,
): Promise<Template> {
  const name = `bench_template_${crypto.randomUUID().replaceAll("-", "").slice(0, 8)}`;
  const admin = postgres(serverUrl, { max: 1, ...quiet });
  try {
    await admin.unsafe(`create database ${name} template template0`);
  } finally {
    await admin.end({ timeout: 5 });
  }
  const url = withDatabase(serverUrl, name);
  const sql = postgres(url, { max: 1, ...quiet });
  try {
    await installPgmq(sql);
    await applyMigrations(sql);
    if (local) await sql`select pgflow.set_local_development(true)`;
    for (const flow of flows) await ensureFlowCompiled(sql, flow);
    for (const queue of queues) await sql`select pgmq.create(${queue})`;
    await runMigrations({ connectionString: url, logger: new Logger(() => () => {}) });
  } finally {
    await sql.end({ timeout: 5 });
  }
  return { serverUrl, name, drop: () => dropDatabase(serverUrl, name) };
}

async function dropDatabase(serverUrl: string, name: string): Promise<void> {
  const admin = postgres(serverUrl, { max: 1, ...quiet });
  try {
    await admin.unsafe(`drop database if exists ${name} with (force)`);
  } finally {
    await admin.end({ timeout: 5 });
  }
}

let cells = 0;

/** Runs `fn` on a new database cloned from `template` (its URL), then drops the database. */
export async function withFreshDatabase<T>(
  template: Template,
  fn: (url: string) => Promise<T>,
): Promise<T> {
  const name = `${template.name}_cell${++cells}`;
  const admin = postgres(template.serverUrl, { max: 1, ...quiet });
  try {
    await admin.unsafe(`create database ${name} template ${template.name}`);
  } finally {
    await admin.end({ timeout: 5 });
  }
  try {
    return await fn(withDatabase(template.serverUrl, name));
  } finally {
    await dropDatabase(template.serverUrl, name);
  }
}
