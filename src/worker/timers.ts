import type { ActivityLog } from "../platform/activity.ts";
import type { Logger } from "../platform/logger.ts";
import type { Sql } from "../platform/types.ts";
import type { ResolvedConfig } from "./config.ts";
import { recoverStalledTasks } from "./recovery.ts";
import { tickSchedules } from "./schedule_ticks.ts";
import { logSummaries } from "./summary.ts";
import { beatUntilStopped } from "./worker_row.ts";
import { QUEUE_SAMPLE_MS, sampleQueue } from "./queue_sample.ts";
import { SPAN_SWEEP_MS, sweepEndedSpans } from "../telemetry/span_sweep.ts";

/** What a worker's timers need. */
export interface TimerDeps {
  readonly sql: Sql;
  readonly worker: { readonly id: string; readonly queueName: string };
  readonly log: Logger;
  readonly activity: ActivityLog;
  readonly config: ResolvedConfig;
  /** Aborted once the worker has stopped: every timer ends. */
  readonly signal: AbortSignal;
  /** Whether the worker is running: the heartbeat beats only then. */
  readonly running: () => boolean;
  /** Called when the heartbeat finds the worker deprecated. */
  readonly onDeprecated: () => void;
}

/**
 * Starts a running worker's timers: the heartbeat (which notices a deprecation), the summary
 * line, stalled-task recovery and schedule ticks unless they are turned off, and the queue's sample
 * for the telemetry gauges and the sweep for ended runs' spans while telemetry is on. Each promise settles once `signal`
 * aborts and its last tick has ended.
 */
export function startTimers(deps: TimerDeps): Promise<void>[] {
  const { sql, log, config, signal } = deps;
  const timing = (intervalMs: number) => ({ intervalMs, timeoutMs: config.queryTimeoutMs });
  const recovery = recoverStalledTasks(sql, log, timing(config.stalledRecoveryIntervalMs), signal);
  const queue = sampleQueue(sql, deps.worker.queueName, log, timing(QUEUE_SAMPLE_MS), signal);
  const spans = sweepEndedSpans(sql, log, timing(SPAN_SWEEP_MS), signal);
  const schedules = tickSchedules(sql, log, timing(config.scheduleTickIntervalMs), signal);
  return [
    beatUntilStopped(sql, deps.worker.id, log, {
      ...timing(config.heartbeatIntervalMs),
      signal,
      running: deps.running,
      onDeprecated: deps.onDeprecated,
    }),
    logSummaries(
      sql,
      deps.worker.queueName,
      deps.activity,
      timing(config.logSummaryIntervalMs),
      signal,
    ),
    ...(recovery === undefined ? [] : [recovery]),
    ...(queue === undefined ? [] : [queue]),
    ...(spans === undefined ? [] : [spans]),
    ...(schedules === undefined ? [] : [schedules]),
  ];
}
