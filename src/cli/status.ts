/**
 * `pgflow status [--database-url URL] [--stale-after SECONDS]`: one screen about a database: the
 * engine version, queues with their depth and live workers, tasks waiting for capacity, runs by
 * status, aliases and their targets, and whether every (flow, step) pair that needs a handler has
 * a live worker (the coverage check).
 *
 * @module
 */
import { describeConnection } from "../platform/connection_kind.ts";
import type { Sql } from "../platform/types.ts";
import { coverageCounts, type CoverageRow, queueCoverage } from "../operations/coverage.ts";
import { queueDepths } from "../operations/queue_depths.ts";
import { readSchemaVersion, schemaVersionProblem } from "../operations/schema_version.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { parseArgs } from "./args.ts";
import { aliasLine, readAliases } from "./deploy/aliases.ts";
import { databaseUrl, openDatabase, redact } from "./connect.ts";
import { describeError } from "./migration_runner.ts";
import { CliError, result, UsageError } from "./output.ts";

/** The help text of `pgflow status`. */
export const STATUS_HELP = `pgflow status [--database-url URL] [--stale-after SECONDS]

Prints one screen about a database: the engine version (and whether it matches this CLI), every
queue with its depth and live workers, tasks waiting for a concurrency limit (per queue and key:
how many, the oldest's wait, why), runs by status, each alias and the version it starts (and
its other versions), and whether coverage is complete (every (flow, step) pair that needs a
handler has a live worker; details: pgflow coverage).

  --database-url URL     the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --stale-after SECONDS  a worker is live if it sent a heartbeat this recently; default 30

Exit codes: 0 all well, 1 the schema is missing or another version, or coverage is incomplete,
2 usage error.`;

/** One queue's line. */

/**
 * Runs `pgflow status`; returns the exit code.
 *
 * @example
 * ```ts
 * import { status } from "./status.ts";
 *
 * // Deno.exit(await status(["--database-url", "postgres://postgres@127.0.0.1:54330/postgres"]));
 * ```
 */
export async function status(argv: readonly string[]): Promise<number> {
  const args = parseArgs(
    argv,
    { "database-url": "string", "stale-after": "string" },
    "pgflow status",
  );
  if (args.help) {
    result(STATUS_HELP);
    return 0;
  }
  const staleText = args.strings["stale-after"] ?? "30";
  const staleAfter = Number(staleText);
  if (!Number.isInteger(staleAfter) || staleAfter < 1 || staleAfter > 86_400) {
    throw new UsageError(
      `--stale-after must be whole seconds from 1 to 86400, got ${JSON.stringify(staleText)}`,
    );
  }
  const { url } = databaseUrl(args.strings["database-url"], "pgflow status");
  const sql = await openDatabase(url);
  try {
    const lines = await statusLines(sql, url, staleAfter);
    result(lines.text);
    return lines.ok ? 0 : 1;
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      `could not read the status: ${describeError(error)}. Connect as the role that owns the ` +
        "pgflow schema (postgres on Supabase)",
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
}

/**
 * Builds the status screen of a connected database, and whether everything is well.
 *
 * @example
 * ```ts
 * import { statusLines } from "./status.ts";
 *
 * // const { text, ok } = await statusLines(sql, url, 30);
 * ```
 */
export async function statusLines(
  sql: Sql,
  url: string,
  staleAfter: number,
): Promise<{ text: string; ok: boolean }> {
  const out: string[] = [];
  const row = (label: string, value: string) => out.push(`${label.padEnd(10)}  ${value}`);
  const connection = await describeConnection(sql, url);
  row("database", `${redact(url)} (${connection.kind})`);
  const found = await readSchemaVersion(sql);
  const problem = schemaVersionProblem(found, ENGINE_VERSION);
  if (found.kind !== "versioned") {
    row("engine", `not installed — ${problem}`);
    return { text: out.join("\n"), ok: false };
  }
  const [{ migrations, local }] = await sql<{ migrations: number; local: boolean }[]>`
    select (select count(*)::int from pgflow.migrations) as migrations,
           pgflow.is_local_development() as local`;
  row(
    "engine",
    `${found.version} (${migrations} migrations; this CLI: ${ENGINE_VERSION}` +
      `${problem ? " — MISMATCH" : ""}); local development: ${local ? "on" : "off"}`,
  );
  if (problem) row("", problem);
  const queues = await queueDepths(sql, staleAfter);
  if (queues.length === 0) row("queues", "none");
  else {
    const table = formatTable(
      ["queue", "messages", "visible", "oldest", "live workers"],
      queues.map((q) => [
        q.name,
        q.messages === null ? "?" : String(q.messages),
        q.visible === null ? "-" : String(q.visible),
        q.oldestSeconds === null ? "-" : `${q.oldestSeconds} s`,
        String(q.liveWorkers),
      ]),
    );
    table.forEach((line, i) => row(i === 0 ? "queues" : "", line));
  }
  // Flow control's waiting tasks exist only in an engine of this version.
  if (!problem) {
    waitingRows(await readWaiting(sql)).forEach((l, i) => row(i === 0 ? "waiting" : "", l));
  }
  const runs = await sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from pgflow.runs group by status order by status`;
  row("runs", runs.length ? runs.map((r) => `${r.status} ${r.n}`).join(", ") : "none");
  const aliases = await readAliases(sql);
  if (aliases.length === 0) row("aliases", "none");
  else aliases.forEach((a, i) => row(i === 0 ? "aliases" : "", aliasLine(a)));
  const coverage = await queueCoverage(sql, undefined, staleAfter);
  row("coverage", coverageLine(coverage));
  const ok = problem === undefined && coverageCounts(coverage).MISSING === 0;
  return { text: out.join("\n"), ok };
}

interface WaitingRow {
  queue_name: string;
  limit_scope: string;
  limit_key: string;
  waiting: number;
  oldest_seconds: number;
  reason: string;
}

/** Tasks waiting for capacity, per queue and (scope, key), oldest first. */
function readWaiting(sql: Sql): Promise<WaitingRow[]> {
  return sql<WaitingRow[]>`
    select queue_name, limit_scope, limit_key, waiting::int,
           floor(extract(epoch from now() - oldest_queued_at))::int as oldest_seconds, reason
    from pgflow.waiting_tasks()`;
}

/** The waiting section: none, or a table of the keys with tasks waiting and why. */
function waitingRows(rows: readonly WaitingRow[]): string[] {
  if (rows.length === 0) return ["none (no task waits for a concurrency limit)"];
  return formatTable(
    ["queue", "scope", "key", "tasks", "oldest", "why"],
    rows.map((w) => [
      w.queue_name,
      w.limit_scope,
      w.limit_key === "" ? "-" : w.limit_key,
      String(w.waiting),
      `${w.oldest_seconds} s`,
      w.reason,
    ]),
  );
}

/** The coverage verdict, the same one `pgflow coverage` exits with: incomplete iff a pair is MISSING. */
function coverageLine(rows: readonly CoverageRow[]): string {
  if (rows.length === 0) return "complete (no routes, nothing in flight)";
  const counts = coverageCounts(rows);
  const tally = `${counts.ok} ok, ${counts.idle} idle, ${counts.PARTIAL} PARTIAL, ` +
    `${counts.STALE} STALE, ${counts.MISSING} MISSING`;
  const list = (status: string) => {
    const hit = rows.filter((r) => r.status === status);
    return hit.slice(0, 5).map((r) => `${r.queueName}: ${r.flowSlug}.${r.stepSlug}`).join("; ") +
      (hit.length > 5 ? "; …" : "");
  };
  if (counts.MISSING > 0) {
    return `INCOMPLETE: work is waiting with no live worker for ${counts.MISSING} of ` +
      `${rows.length} pair(s) (${list("MISSING")}); ${tally}; see \`pgflow coverage\`, and start ` +
      "a worker for each";
  }
  const stale = counts.STALE > 0
    ? `; STALE: ${list("STALE")} (a started task's worker is gone; stalled recovery takes it back)`
    : "";
  const partial = counts.PARTIAL > 0
    ? `; PARTIAL: ${
      list("PARTIAL")
    } (not every live worker on the queue serves it: its messages are read and handed back; ` +
      "give every worker on a queue the same handlers)"
    : "";
  return `complete: no work waits without a live worker (${tally})${stale}${partial}`;
}

function formatTable(header: string[], body: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd();
  return [line(header), ...body.map(line)];
}
