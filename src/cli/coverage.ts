/**
 * `pgflow coverage [--database-url URL] [--queue NAME] [--stale-after SECONDS] [--json]`: per
 * queue, the (flow, step) pairs that need a handler, whether work is waiting for them and whether
 * a live worker serves each (`pgflow.queue_coverage` decides the status).
 *
 * @module
 */
import {
  coverageCounts,
  formatCoverage,
  partialNote,
  queueCoverage,
} from "../operations/coverage.ts";
import { parseArgs } from "./args.ts";
import { databaseUrl, openDatabase } from "./connect.ts";
import { describeError } from "./migration_runner.ts";
import { CliError, result, UsageError } from "./output.ts";

/** The help text of `pgflow coverage`. */
export const COVERAGE_HELP =
  `pgflow coverage [--database-url URL] [--queue NAME] [--stale-after SECONDS] [--json]

Lists, per queue, every (flow, step) pair that needs a handler (a persisted route, or tasks in
flight), the work waiting for it and how many live workers serve it. Status, per pair:
  MISSING  work is waiting (tasks waiting for capacity, queued or started, in started runs) and no
           live worker serves it
  STALE    a live worker serves it, but a started task is held by a worker that is gone
  PARTIAL  a live worker serves it, but not every live worker on the queue does: the others read
           its messages and hand them back; give every worker on a queue the same handler set
  ok       every live worker on the queue serves it
  idle     no work waiting and no live worker: nothing to do until a run starts

  --database-url URL     the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --queue NAME           one queue only
  --stale-after SECONDS  a worker is live if it sent a heartbeat this recently; default 30
  --json                 one JSON object: {"pairs": [...], "counts": {...}}

Exit codes: 0 no pair MISSING, 1 a pair is MISSING, 2 usage error.`;

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
    { "database-url": "string", "queue": "string", "stale-after": "string", "json": "boolean" },
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
    const counts = coverageCounts(rows);
    if (args.booleans.has("json")) {
      result(JSON.stringify({ pairs: rows, counts }));
    } else {
      result(formatCoverage(rows));
      const notes: string[] = [];
      if (counts.MISSING > 0) {
        notes.push(
          `${counts.MISSING} pair(s) MISSING: work is waiting and no live worker serves it; ` +
            "deploy (or start) a worker with those handlers on that queue",
        );
      }
      if (counts.STALE > 0) {
        notes.push(
          `${counts.STALE} pair(s) STALE: a started task is held by a worker that is gone; ` +
            "stalled recovery takes it back after the step's timeout + 30 s " +
            "(pgflow.requeue_stalled_tasks())",
        );
      }
      if (counts.PARTIAL > 0) notes.push(partialNote(rows));
      if (notes.length > 0) result(`\n${notes.join("\n")}`);
    }
    return counts.MISSING > 0 ? 1 : 0;
  } catch (error) {
    throw new CliError(
      `could not read the coverage: ${describeError(error)}. Is the engine installed (pgflow ` +
        "status), and is this the role that owns the pgflow schema?",
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
}
