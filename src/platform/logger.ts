/**
 * Structured logging: one JSON object per line, with the fields that identify work (queue,
 * worker, run id, message id, flow, step). Message bodies, inputs, outputs and secrets are never
 * logged. A failed task's line carries the error's kind, code and length (`errorFields` in
 * src/task/result.ts), and the first line of its message, at most 300 characters, when the
 * engine wrote it; an error thrown by the flow's code (its handler, its input schema) may quote
 * personal data, so its text is left out unless the worker's `logErrorMessages` option is set. A
 * thrown object that is not an `Error` is never serialised into a line. The whole text, at most
 * 2,000 characters, is stored by `fail_task` in `step_tasks.error_message` and the attempt
 * history. Errors of the worker's own database calls are logged as their first line, at most 200
 * characters.
 *
 * The default sink keeps to the platform's log limit (about 100 events per 10 s per isolate):
 * beyond 5 lines of one event or 45 lines in 10 s, lines are aggregated into one line per kind
 * with its count, never dropped (`log_budget.ts`).
 *
 * @module
 */
import { LogBudget } from "./log_budget.ts";

/**
 * Log levels, most severe first.
 *
 * @example
 * ```ts
 * import type { LogLevel } from "@pgflow/shared";
 *
 * const level: LogLevel = "debug";
 * ```
 */
export type LogLevel = "error" | "warn" | "info" | "debug";

/**
 * The identifying fields a log line may carry. Anything else is a short scalar (a count, a
 * duration, a status), never a body or a secret.
 *
 * @example
 * ```ts
 * import type { LogFields } from "@pgflow/shared";
 *
 * const fields: LogFields = { queue: "thread_processing", messageId: "42", flow: "triage_v1" };
 * ```
 */
export interface LogFields {
  /** The queue the worker polls. */
  readonly queue?: string;
  /** A message id as an exact decimal string. */
  readonly messageId?: string;
  /** A concrete flow slug. */
  readonly flow?: string;
  /** A step slug. */
  readonly step?: string;
  /** The worker id. */
  readonly worker?: string;
  /** The run id of the task a line is about: follow one run through the logs by it. */
  readonly runId?: string | null;
  /** Other scalar details. */
  readonly [key: string]: string | number | boolean | null | undefined | readonly string[];
}

/**
 * A structured logger.
 *
 * @example
 * ```ts
 * import { createLogger } from "@pgflow/shared";
 *
 * const log = createLogger({ level: "info" }).with({ worker: "w1", queue: "q" });
 * log.info("polling", { batch: 10 });
 * ```
 */
export interface Logger {
  /** Logs an error. */
  error(event: string, fields?: LogFields): void;
  /** Logs a warning. */
  warn(event: string, fields?: LogFields): void;
  /** Logs information. */
  info(event: string, fields?: LogFields): void;
  /** Logs detail useful when debugging. */
  debug(event: string, fields?: LogFields): void;
  /** A logger that adds `fields` to every line. */
  with(fields: LogFields): Logger;
}

/**
 * One finished log record, as handed to a {@link LogSink}.
 *
 * @example
 * ```ts
 * import type { LogRecord } from "@pgflow/shared";
 *
 * const record: LogRecord = { level: "warn", event: "unknown message", fields: { messageId: "7" } };
 * ```
 */
export interface LogRecord {
  /** The level. */
  readonly level: LogLevel;
  /** What happened, in a few words. */
  readonly event: string;
  /** The identifying fields. */
  readonly fields: LogFields;
}

/**
 * Where log records go; the default writes JSON lines to stderr (warn and error) or stdout.
 *
 * @example
 * ```ts
 * import { createLogger, type LogRecord, type LogSink } from "@pgflow/shared";
 *
 * const records: LogRecord[] = [];
 * const sink: LogSink = (record) => records.push(record);
 * createLogger({ sink }).warn("unknown message", { queue: "q", messageId: "1" });
 * ```
 */
export type LogSink = (record: LogRecord) => void;

/**
 * Options of {@link createLogger}.
 *
 * @example
 * ```ts
 * import type { LoggerOptions } from "@pgflow/shared";
 *
 * const options: LoggerOptions = { level: "debug" };
 * ```
 */
export interface LoggerOptions {
  /** Lowest level written; default `info`. */
  readonly level?: LogLevel;
  /** Destination; default JSON lines on the console. */
  readonly sink?: LogSink;
}

const RANK: Readonly<Record<LogLevel, number>> = { error: 0, warn: 1, info: 2, debug: 3 };

/** The level rank a logger from {@link createLogger} writes up to (others do not say). */
const THRESHOLD: unique symbol = Symbol("pgflow.logThreshold");

/**
 * Whether `log` writes lines of `level`: true unless it is a logger of {@link createLogger} (or a
 * copy of one) whose level leaves them out. Lets a caller skip building what would be dropped.
 *
 * @example
 * ```ts
 * import { createLogger, writesLevel } from "./logger.ts";
 *
 * writesLevel(createLogger({ level: "info" }), "debug"); // false
 * ```
 */
export function writesLevel(log: Logger, level: LogLevel): boolean {
  const threshold = (log as { readonly [THRESHOLD]?: number })[THRESHOLD];
  return threshold === undefined || RANK[level] <= threshold;
}

/**
 * Whether `value` names a log level.
 *
 * @example
 * ```ts
 * import { isLogLevel } from "./logger.ts";
 *
 * isLogLevel("debug"); // true
 * ```
 */
export function isLogLevel(value: unknown): value is LogLevel {
  return typeof value === "string" && Object.hasOwn(RANK, value);
}

/**
 * Creates a structured logger.
 *
 * @param options level and sink
 * @example
 * ```ts
 * import { createLogger } from "@pgflow/shared";
 *
 * const log = createLogger({ level: "warn" });
 * log.warn("unsupported message", { queue: "q", messageId: "12" });
 * ```
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  const threshold = RANK[options.level ?? "info"];
  const sink = options.sink ?? consoleSink;
  const make = (base: LogFields): Logger => {
    const emit = (level: LogLevel) => (event: string, fields: LogFields = {}) => {
      if (RANK[level] <= threshold) sink({ level, event, fields: { ...base, ...fields } });
    };
    const log: Logger & { readonly [THRESHOLD]: number } = {
      error: emit("error"),
      warn: emit("warn"),
      info: emit("info"),
      debug: emit("debug"),
      with: (fields) => make({ ...base, ...fields }),
      [THRESHOLD]: threshold,
    };
    return log;
  };
  return make({});
}

/** The default sink's budget: one per process, as the platform counts lines per isolate. */
const budget = new LogBudget({ write: writeLine });
// Aggregates still held are written as the process ends normally.
globalThis.addEventListener("unload", () => budget.flush());

function consoleSink(record: LogRecord): void {
  budget.offer(record);
}

/**
 * Writes the aggregate lines the default sink holds now instead of at the end of their 10 s
 * window (`EdgeWorker` calls it when its worker has stopped at `beforeunload`).
 *
 * @example
 * ```ts
 * import { flushLogs } from "./logger.ts";
 *
 * flushLogs();
 * ```
 */
export function flushLogs(): void {
  budget.flush();
}

function writeLine(record: LogRecord): void {
  const line = JSON.stringify({
    time: new Date().toISOString(),
    level: record.level,
    event: record.event,
    ...record.fields,
  });
  if (record.level === "error" || record.level === "warn") console.error(line);
  else console.log(line);
}

/** Errors already written to a log, so an outer catch does not print them a second time. */
const logged = new WeakSet<object>();

/**
 * Marks an error as already logged (the worker logs its startup failure once, then rejects with
 * it) and returns it.
 *
 * @example
 * ```ts
 * import { markLogged, wasLogged } from "./logger.ts";
 *
 * const error = markLogged(new Error("boom"));
 * wasLogged(error); // true
 * ```
 */
export function markLogged<E>(error: E): E {
  if (typeof error === "object" && error !== null) logged.add(error);
  return error;
}

/**
 * Whether {@link markLogged} marked this error.
 *
 * @example
 * ```ts
 * import { wasLogged } from "./logger.ts";
 *
 * wasLogged(new Error("boom")); // false
 * ```
 */
export function wasLogged(error: unknown): boolean {
  return typeof error === "object" && error !== null && logged.has(error);
}
