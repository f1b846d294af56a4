/**
 * Database helpers for tests: one database per test file, cloned from a template built once per
 * run; extra connections for race tests; waiting on a condition with a timeout.
 *
 * Run tests through `deno task test`, which starts the server and builds the templates, or set
 * `PGFLOW_TEST_SERVER_URL` to a server whose templates were built by `prepareTemplates`.
 *
 * @module
 */
import postgres from "postgres";
import { type TemplateKind, TEMPLATES, withDatabase } from "./templates.ts";

/** What a database test receives. */
export interface TestDb {
  /** Connection URL of this file's database. */
  url: string;
  /** A pool (up to 4 connections) on this file's database, closed after the test. */
  sql: postgres.Sql;
  /** Opens another pool (default: one connection), closed after the test. */
  connect(options?: postgres.Options<Record<string, postgres.PostgresType>>): postgres.Sql;
  /** Notices raised on `sql` during this test, in order. */
  notices: postgres.Notice[];
}

/** Options of one database test file. */
export interface TestFileOptions {
  /** Template the file's database is cloned from; default `pgflow`. */
  template?: TemplateKind;
}

/** Options of one test. */
export interface DbTestOptions {
  /** Give this test a database of its own instead of the file's shared one. */
  fresh?: boolean;
  ignore?: boolean;
  /** Fail the test when a timer or other async op it started is still pending at its end. */
  sanitizeOps?: boolean;
}

/** Server URL of the test run (a maintenance database on the test server). */
export function serverUrl(): string {
  const url = Deno.env.get("PGFLOW_TEST_SERVER_URL");
  if (!url) {
    throw new Error(
      "PGFLOW_TEST_SERVER_URL is not set: run tests with `deno task test [files]`, which starts a local Postgres",
    );
  }
  return url;
}

/** Returns whether the run's PGMQ is the real extension (`extension`) or the compatible SQL. */
export function pgmqSource(): string {
  return Deno.env.get("PGFLOW_TEST_PGMQ_SOURCE") ?? "compatible";
}

const quiet = { onnotice: () => {} };

async function createDatabase(fileUrl: string, template: TemplateKind): Promise<string> {
  const base = fileUrl.split("/").pop()!.replace(/\.ts$/, "").replace(/[^a-z0-9]+/gi, "_")
    .toLowerCase().slice(0, 40);
  const name = `t_${base}_${crypto.randomUUID().slice(0, 8)}`;
  const from = template === "empty" ? "template0" : TEMPLATES[template];
  const admin = postgres(serverUrl(), { max: 1, ...quiet });
  try {
    await admin.unsafe(`create database ${name} template ${from}`);
  } finally {
    await admin.end();
  }
  return withDatabase(serverUrl(), name);
}

/**
 * Declares the database of one test file and returns a `test` function bound to it.
 *
 * @example
 * ```ts
 * const db = testDatabase(import.meta.url);
 * db.test("sends a message", async ({ sql }) => {
 *   await sql`select pgmq.create('q')`;
 * });
 * ```
 */
export function testDatabase(
  fileUrl: string,
  fileOptions: TestFileOptions = {},
): { test(name: string, fn: (db: TestDb) => Promise<void>, options?: DbTestOptions): void } {
  const template = fileOptions.template ?? "pgflow";
  let shared: Promise<string> | undefined;
  return {
    test(name, fn, options = {}) {
      Deno.test({
        name,
        ignore: options.ignore,
        sanitizeOps: options.sanitizeOps,
        async fn() {
          const url = options.fresh
            ? await createDatabase(fileUrl, template)
            : await (shared ??= createDatabase(fileUrl, template));
          const notices: postgres.Notice[] = [];
          const pools: postgres.Sql[] = [];
          const open = (o: postgres.Options<Record<string, postgres.PostgresType>>) => {
            const pool = postgres(url, { ...quiet, ...o });
            pools.push(pool);
            return pool;
          };
          const sql = open({ max: 4, onnotice: (n) => notices.push(n) });
          try {
            await warm(sql);
            const connect = (o = {}) => {
              const pool = open({ max: 1, ...o });
              warm(pool).catch(() => {}); // the test's own queries report a connection that fails
              return pool;
            };
            await fn({ url, sql, notices, connect });
          } finally {
            await Promise.all(pools.map((p) => p.end({ timeout: 5 })));
          }
        },
      });
    },
  };
}

/**
 * Opens `pool`'s first connection with a query of no consequence. postgres.js 3.4.7 learns array
 * types on each new connection and applies them a few promise jobs after starting that
 * connection's first query; under Deno, a first query of 1 KB or more (written at once) whose
 * reply arrives while the process is descheduled binds its arrays as `'' + array`. A pool opened
 * with `createPool` holds that query a turn instead (src/platform/wire_gate.ts); the tests' plain
 * pools start with this short one, which postgres.js writes on its next turn. A later query of a
 * one-connection pool waits behind it; a test's first query on `sql` comes after it.
 */
async function warm(pool: postgres.Sql): Promise<void> {
  await pool`select 1`;
}

/** Options of {@link waitFor}. */
export interface WaitOptions {
  timeoutMs?: number;
  intervalMs?: number;
  /** Says what was awaited, for the timeout error. */
  what?: string;
}

/**
 * Polls `probe` until it returns a value other than `undefined`, `null` or `false`, and returns it;
 * throws after the timeout, naming what it waited for.
 *
 * @example
 * ```ts
 * const run = await waitFor(async () => (await sql`select * from pgflow.runs where status = 'completed'`)[0]);
 * ```
 */
export async function waitFor<T>(
  probe: () => Promise<T | undefined | null | false> | T | undefined | null | false,
  { timeoutMs = 60_000, intervalMs = 50, what = "condition" }: WaitOptions = {},
): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await probe();
    if (value !== undefined && value !== null && value !== false) return value as T;
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, intervalMs));
  }
}
