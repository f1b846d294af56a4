/**
 * Shared helpers of the PGMQ conformance suite: PGMQ 1.5.1's public surface, which `local/pgmq.sql`
 * implements (docs/design.md, The PGMQ rule). The suite runs unchanged against the real extension
 * and the project's PGMQ-compatible SQL; these helpers tell the two apart where PGMQ's versions and
 * the compatible SQL answer differently.
 *
 * @module
 */
import postgres from "postgres";
import { pgmqSource, serverUrl } from "../support/db.ts";

/** What provides `pgmq.*` in the test database. */
export interface PgmqTarget {
  /** True for the real extension, false for the compatible SQL. */
  extension: boolean;
  /** Extension version (`extversion`), or `undefined` on the compatible SQL. */
  version?: string;
  /** Whether the 1.5 surface (headers, overloads, conditional) is present. */
  has15: boolean;
  /** Whether pop and set_vt use clock_timestamp() (1.5.1 and the compatible SQL). */
  has151: boolean;
}

function atLeast(version: string, min: number[]): boolean {
  const parts = version.split(".").map((p) => Number.parseInt(p, 10) || 0);
  for (let i = 0; i < min.length; i++) {
    if ((parts[i] ?? 0) !== min[i]) return (parts[i] ?? 0) > min[i];
  }
  return true;
}

/** The target that the version `extversion` of the extension makes (1.5 surface, 1.5.1 clocks). */
function extensionTarget(version: string): PgmqTarget {
  return {
    extension: true,
    version,
    has15: atLeast(version, [1, 5, 0]),
    has151: atLeast(version, [1, 5, 1]),
  };
}

/**
 * What provides PGMQ in every database of this run, known before any test starts, so a test that
 * does not apply to it is marked ignored (with the reason as its flag's name) instead of passing by
 * returning early. The run's databases are cloned from a template built from `template0`: PGMQ
 * there is the compatible SQL or the extension at the server's default version, read from the
 * server's catalog (never from the template, which other test files clone meanwhile).
 */
export const RUN_TARGET: PgmqTarget = await runTarget();

async function runTarget(): Promise<PgmqTarget> {
  if (pgmqSource() === "compatible") return { extension: false, has15: true, has151: true };
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  try {
    const [row] = await admin<{ v: string | null }[]>`
      select default_version as v from pg_available_extensions where name = 'pgmq'`;
    if (!row?.v) throw new Error(`the run uses the pgmq extension, which the server does not have`);
    return extensionTarget(row.v);
  } finally {
    await admin.end();
  }
}

/** The extension predates PGMQ 1.5 (no headers, no overloads, no conditional reads). */
export const BEFORE_15 = !RUN_TARGET.has15;

/** The run uses the PGMQ extension: tests of the compatible SQL alone do not apply. */
export const ON_EXTENSION = RUN_TARGET.extension;

/** The run uses the compatible SQL: tests of the extension alone (membership) do not apply. */
export const ON_COMPATIBLE = !RUN_TARGET.extension;

/**
 * Finds out what provides PGMQ. `pgmqSource()` decides for fresh installs; an `existing` schema is
 * identified through `pg_extension`.
 */
export async function pgmqTarget(sql: postgres.Sql): Promise<PgmqTarget> {
  const source = pgmqSource();
  let version: string | undefined;
  if (source !== "compatible") {
    const rows = await sql<{ v: string }[]>`
      select extversion as v from pg_extension where extname = 'pgmq'`;
    version = rows[0]?.v;
  }
  if (version === undefined) return { extension: false, has15: true, has151: true };
  return extensionTarget(version);
}

let counter = 0;

/** A queue name no other test uses: `prefix_<random>` (lowercase, well under 47 characters). */
export function freshQueue(prefix = "t"): string {
  counter++;
  return `${prefix}_${counter}_${crypto.randomUUID().slice(0, 8)}`;
}

/** Message ids of result rows (or bare ids), as sorted numbers: never rely on row order. */
export function sortedIds(rows: readonly unknown[], column = "msg_id"): number[] {
  return rows
    .map((r) =>
      Number(typeof r === "object" && r !== null ? (r as Record<string, unknown>)[column] : r)
    )
    .sort((a, b) => a - b);
}

/** Whether a relation exists (`pgmq.q_x` style, already quoted as needed). */
export async function relationExists(sql: postgres.Sql, name: string): Promise<boolean> {
  const [{ ok }] = await sql<{ ok: boolean }[]>`select to_regclass(${name}) is not null as ok`;
  return ok;
}

/** The P0001 error PGMQ raises for `$`, `;`, `--` or `'` in a queue name. */
export function isInvalidCharsError(e: unknown): boolean {
  const err = e as { code?: string; message?: string };
  return err.code === "P0001" &&
    err.message === "queue name contains invalid characters: $, ;, --, or \\'";
}

/** The SQLSTATE of a database error, if it is one. */
export function errorCode(e: unknown): string | undefined {
  return (e as { code?: string }).code;
}

/**
 * A predicate for `assert.rejects`: a database error with this SQLSTATE and, when given, a message
 * equal to the string or matching the pattern.
 */
export function pgError(code: string, message?: string | RegExp): (e: unknown) => boolean {
  return (e: unknown) => {
    const err = e as { code?: string; message?: string };
    if (err.code !== code) return false;
    if (message === undefined) return true;
    return typeof message === "string" ? err.message === message : message.test(err.message ?? "");
  };
}
