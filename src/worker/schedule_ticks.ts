import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Logger } from "../platform/logger.ts";
import { every } from "../util/periodic.ts";

/**
 * Fires the due ticks of every schedule from a worker, so schedules keep working on a database
 * without pg_cron, and releases the rate-limited tasks whose window has room again. Any number of workers (and pg_cron's job) may call it at once: a tick starts
 * one run whoever fires it (`pgflow.fire_due_schedules`, supabase/schemas/0270_schedules.sql).
 * A failure is logged when it differs from the previous one, not once a second. Returns how many
 * runs were started, or `null` on failure.
 */
export class ScheduleTicker {
  #lastError: string | undefined;

  constructor(
    private readonly sql: Sql,
    private readonly log: Logger,
    private readonly timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
  ) {}

  /** One pass: every due tick of every active schedule. */
  async tick(): Promise<number | null> {
    try {
      // Rate-limited tasks whose time has come are released on the same beat: a rate of one per
      // second needs a release each second. In a transaction of its own: it takes its keys' locks
      // in one ordered pass, and the runs a schedule starts take theirs in another at commit.
      await bounded(
        this.sql`select pgflow.release_rate_waiting()`,
        "release_rate_waiting",
        this.timeoutMs,
      );
      const [row] = await bounded(
        this.sql<{ started: number }[]>`select pgflow.fire_due_schedules() as started`,
        "fire_due_schedules",
        this.timeoutMs,
      );
      this.#lastError = undefined;
      if (row.started > 0) this.log.debug("schedule ticks fired", { runs: row.started });
      return row.started;
    } catch (error) {
      const message = (error as Error).message;
      if (message !== this.#lastError) {
        this.log.warn("schedule ticks failed", { error: message });
        this.#lastError = message;
      }
      return null;
    }
  }
}

/**
 * {@link ScheduleTicker.tick} every `intervalMs` until `signal` aborts; nothing when `intervalMs`
 * is 0 (ticks left to pg_cron).
 */
export function tickSchedules(
  sql: Sql,
  log: Logger,
  timing: { readonly intervalMs: number; readonly timeoutMs: number },
  signal: AbortSignal,
): Promise<void> | undefined {
  if (timing.intervalMs <= 0) return undefined;
  const ticker = new ScheduleTicker(sql, log, timing.timeoutMs);
  return every(timing.intervalMs, signal, () => ticker.tick().then(() => {}));
}
