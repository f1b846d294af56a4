import type { ClaimedTask } from "./claim.ts";
import { type LogFields, type Logger, type LogLevel, writesLevel } from "../platform/logger.ts";

/**
 * The logger of one task: every line carries the task's identity (run, message, flow, step,
 * index, attempt). The child logger that adds them is made at the first line actually written,
 * so a task that logs nothing at the logger's level (a completed task, at `info`) costs none.
 *
 * @example
 * ```ts
 * import { TaskLog } from "./task_log.ts";
 * import { createLogger } from "../platform/logger.ts";
 * import type { ClaimedTask } from "./claim.ts";
 *
 * declare const task: ClaimedTask;
 * const log = new TaskLog(createLogger({ level: "info" }), task);
 * log.debug("task started"); // dropped, and no child logger made
 * log.error("task failed", { ms: 12 }); // carries runId, messageId, flow, step, taskIndex, attempt
 * ```
 */
export class TaskLog implements Logger {
  readonly #parent: Logger;
  readonly #task: ClaimedTask;
  #child: Logger | undefined;

  constructor(parent: Logger, task: ClaimedTask) {
    this.#parent = parent;
    this.#task = task;
  }

  /** Logs an error. */
  error(event: string, fields?: LogFields): void {
    this.#write("error", event, fields);
  }

  /** Logs a warning. */
  warn(event: string, fields?: LogFields): void {
    this.#write("warn", event, fields);
  }

  /** Logs information. */
  info(event: string, fields?: LogFields): void {
    this.#write("info", event, fields);
  }

  /** Logs detail useful when debugging. */
  debug(event: string, fields?: LogFields): void {
    this.#write("debug", event, fields);
  }

  /** A logger that adds `fields` to the task's. */
  with(fields: LogFields): Logger {
    return this.#log().with(fields);
  }

  #write(level: LogLevel, event: string, fields: LogFields | undefined): void {
    if (writesLevel(this.#parent, level)) this.#log()[level](event, fields);
  }

  #log(): Logger {
    const task = this.#task;
    return this.#child ??= this.#parent.with({
      runId: task.runId,
      messageId: task.messageId,
      flow: task.flowSlug,
      step: task.stepSlug,
      taskIndex: task.taskIndex,
      attempt: task.attempt,
    });
  }
}
