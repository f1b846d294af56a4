/**
 * `pgflow coverage [--database-url URL] [--queue NAME] [--stale-after SECONDS]`: per queue, the
 * (flow, step) pairs that need a handler and whether a live worker serves each.
 *
 * @module
 */
import { formatCoverage, queueCoverage } from "../operations/coverage.ts";
import { parseArgs } from "./args.ts";
import { databaseUrl, openDatabase } from "./database.ts";
import { describeError } from "./migrator.ts";
import { CliError, result, UsageError } from "./output.ts";

/** The help text of `pgflow coverage`. */
export const COVERAGE_HELP =
  `pgflow coverage [--database-url URL] [--queue NAME] [--stale-after SECONDS]

Lists, per queue, every (flow, step) pair that needs a handler (a persisted route, or tasks in
flight) and how many live workers serve it; MISSING marks a pair no live worker serves.

  --database-url URL     the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --queue NAME           one queue only
  --stale-after SECONDS  a worker is live if it sent a heartbeat this recently; default 30

Exit codes: 0 every pair served, 1 a pair has no live worker, 2 usage error.`;

/**
 * Runs `pgflow coverage`; returns the exit code.
 *
 * @example
 * ```ts
 * import { coverage } from "./coverage.ts";
 *
 * // Deno.exit(await coverage(["--queue", "thread_processing"]));
 * ```
 */
export async function coverage(argv: readonly string[]): Promise<number> {
  const args = parseArgs(
    argv,
    { "database-url": "string", "queue": "string", "stale-after": "string" },
    "pgflow coverage",
  );
  if (args.help) {
    result(COVERAGE_HELP);
    return 0;
  }
  const staleText = args.strings["stale-after"] ?? "30";
  const staleAfter = Number(staleText);
  if (!Number.isInteger(staleAfter) || staleAfter < 1 || staleAfter > 86_400) {
    throw new UsageError(
      `--stale-after must be whole seconds from 1 to 86400, got ${JSON.stringify(staleText)}`,
    );
  }
  const { url } = databaseUrl(args.strings["database-url"], "pgflow coverage");
  const sql = await openDatabase(url);
  try {
    const rows = await queueCoverage(sql, args.strings.queue, staleAfter);
    result(formatCoverage(rows));
    const missing = rows.filter((r) => !r.served).length;
    if (missing > 0) result(`\n${missing} pair(s) without a live worker`);
    return missing > 0 ? 1 : 0;
  } catch (error) {
    throw new CliError(
      `could not read the coverage: ${describeError(error)}. Is the engine installed (pgflow ` +
        "status), and is this the role that owns the pgflow schema?",
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
}
