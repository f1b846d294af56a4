/**
 * The default log sink's rate budget. Supabase keeps about 100 log events per 10 s per function
 * instance and drops the rest, so a storm of failing tasks would lose exactly the lines that
 * explain it. Within each 10 s window, every event is written individually up to 5 times and all
 * lines up to 45 in total; beyond that, lines are aggregated, not dropped: at the window's end
 * one line per (level, event, flow, step, error kind and code) stands for all of them, with the
 * first one's fields and `aggregated: N`. Aggregate lines count against the next window's total;
 * so no 10 s, aligned to the windows or not, sees more than 90 lines. At most 20 groups are kept
 * per window; lines beyond them are one `log lines aggregated` line with their count.
 *
 * @module
 */
import type { LogFields, LogLevel, LogRecord } from "./logger.ts";

/** Options of {@link LogBudget}; the defaults fit the platform's limit. */
export interface LogBudgetOptions {
  /** Where lines go. */
  readonly write: (record: LogRecord) => void;
  /** The window, default 10,000 ms. */
  readonly windowMs?: number;
  /** Lines written as they come per window, default 45. */
  readonly lines?: number;
  /** Lines of one event written as they come per window, default 5. */
  readonly perEvent?: number;
  /** Aggregate groups kept per window, default 20. */
  readonly groups?: number;
  /** The clock, default `Date.now`. */
  readonly now?: () => number;
  /**
   * Runs `flush` once after `ms`; default an unreferenced timer (it keeps no process alive).
   * Returns a function that cancels it.
   */
  readonly schedule?: (flush: () => void, ms: number) => () => void;
}

interface Group {
  readonly level: LogLevel;
  readonly event: string;
  readonly fields: LogFields;
  count: number;
}

/** The fields that keep two lines apart when they are aggregated. */
const KEY_FIELDS = ["flow", "step", "errorKind", "errorCode", "outcome", "disposition"] as const;

function unrefTimer(flush: () => void, ms: number): () => void {
  const id = setTimeout(flush, ms);
  Deno.unrefTimer(id);
  return () => clearTimeout(id);
}

/**
 * Writes log records within the budget, aggregating the excess (see the module documentation).
 *
 * @example
 * ```ts
 * import { LogBudget } from "./log_budget.ts";
 *
 * const budget = new LogBudget({ write: (record) => console.log(JSON.stringify(record)) });
 * for (let i = 0; i < 500; i++) budget.offer({ level: "warn", event: "task failed", fields: {} });
 * budget.flush(); // 5 lines as they came, then one with aggregated: 495
 * ```
 */
export class LogBudget {
  readonly #write: (record: LogRecord) => void;
  readonly #windowMs: number;
  readonly #lines: number;
  readonly #perEvent: number;
  readonly #maxGroups: number;
  readonly #now: () => number;
  readonly #schedule: (flush: () => void, ms: number) => () => void;
  #windowStart = -Infinity;
  #written = 0;
  #perEventWritten = new Map<string, number>();
  #groups = new Map<string, Group>();
  #overflow = 0;
  #cancel?: () => void;

  /** @param options where lines go, and the budget */
  constructor(options: LogBudgetOptions) {
    this.#write = options.write;
    this.#windowMs = options.windowMs ?? 10_000;
    this.#lines = options.lines ?? 45;
    this.#perEvent = options.perEvent ?? 5;
    this.#maxGroups = options.groups ?? 20;
    this.#now = options.now ?? Date.now;
    this.#schedule = options.schedule ?? unrefTimer;
  }

  /** Writes `record` now, or counts it for its group's line at the window's end. */
  offer(record: LogRecord): void {
    this.#roll();
    const seen = this.#perEventWritten.get(record.event) ?? 0;
    if (this.#written < this.#lines && seen < this.#perEvent) {
      this.#perEventWritten.set(record.event, seen + 1);
      this.#emit(record);
      return;
    }
    const key = [record.level, record.event, ...KEY_FIELDS.map((f) => String(record.fields[f]))]
      .join("\u001f");
    const group = this.#groups.get(key);
    if (group !== undefined) group.count++;
    else if (this.#groups.size < this.#maxGroups) {
      this.#groups.set(key, { ...record, count: 1 });
    } else this.#overflow++;
    this.#cancel ??= this.#schedule(() => {
      this.#cancel = undefined;
      this.flush();
    }, Math.max(0, this.#windowStart + this.#windowMs - this.#now()));
  }

  /** Writes the aggregate lines held so far (the window's end, or the process's). */
  flush(): void {
    this.#cancel?.();
    this.#cancel = undefined;
    const groups = [...this.#groups.values()];
    const overflow = this.#overflow;
    this.#groups = new Map();
    this.#overflow = 0;
    // Counted against the window they are written in, never held back themselves.
    this.#roll();
    for (const g of groups) {
      this.#emit({ level: g.level, event: g.event, fields: { ...g.fields, aggregated: g.count } });
    }
    if (overflow > 0) {
      this.#emit({
        level: "warn",
        event: "log lines aggregated",
        fields: { aggregated: overflow, note: "lines of more kinds than one window keeps apart" },
      });
    }
  }

  #roll(): void {
    const now = this.#now();
    if (now < this.#windowStart + this.#windowMs) return;
    const pending = this.#groups.size > 0 || this.#overflow > 0;
    this.#windowStart = now;
    this.#written = 0;
    this.#perEventWritten = new Map();
    if (pending) this.flush();
  }

  #emit(record: LogRecord): void {
    this.#written++;
    this.#write(record);
  }
}
