import { setImmediate } from "node:timers";
import type { Sql } from "../platform/types.ts";
import type { ClaimedTask } from "../claim/claim.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { completeTask } from "./report.ts";
import type { CompletionArrays, TakenCompletions } from "../claim/read.ts";

interface Pending {
  readonly task: ClaimedTask;
  readonly output: string;
  readonly resolve: () => void;
  readonly reject: (error: unknown) => void;
}

/**
 * Reports completions, several per round trip when they pile up. Completions are sent once the
 * event loop has run what is ready (`setImmediate`): the tasks of one batch that finish together
 * go in one `pgflow.complete_tasks` call, and an idle worker's single completion waits for no
 * timer. At most `maxInFlight` calls run at once; the completions that arrive meanwhile go
 * together in the next call. Under load that turns one round trip and one statement per task into
 * one per batch (a task completed alone costs about twice its share of a batch).
 *
 * Each caller's promise settles with its own completion. If a batch call fails, its completions
 * are sent again one by one (complete_task is idempotent), so one bad completion never fails the
 * others and a lost reply never loses one.
 */
export class CompletionBatcher {
  readonly #sql: Sql;
  readonly #maxInFlight: number;
  readonly #maxBatch: number;
  readonly #timeoutMs: number;
  #queue: Pending[] = [];
  #inFlight = 0;
  #scheduled = false;

  /**
   * @param sql the worker's pool
   * @param maxInFlight calls running at once (keep below the pool size: reads and claims need one)
   * @param maxBatch most completions per call
   * @param timeoutMs bound of each call (see `bounded`)
   */
  constructor(
    sql: Sql,
    maxInFlight = 2,
    maxBatch = 100,
    timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
  ) {
    this.#sql = sql;
    this.#maxInFlight = maxInFlight;
    this.#maxBatch = maxBatch;
    this.#timeoutMs = timeoutMs;
  }

  /** Completes `task` with the exact JSON text `output`; resolves once SQL has done it. */
  complete(task: ClaimedTask, output: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#queue.push({ task, output, resolve, reject });
      if (this.#scheduled) return;
      this.#scheduled = true;
      setImmediate(() => {
        this.#scheduled = false;
        this.#pump();
      });
    });
  }

  /**
   * Takes the completions waiting to be sent (at most `maxBatch`), so that the poll loop's next
   * read carries them; `undefined` when none is waiting. A completion already on its way is not
   * taken, and one taken is never sent by the batcher unless it is given back.
   */
  take(): TakenCompletions | undefined {
    if (this.#queue.length === 0) return undefined;
    const batch = this.#queue.splice(0, this.#maxBatch);
    let settled = false;
    const settle = () => {
      if (settled) throw new Error("taken completions settled twice");
      settled = true;
    };
    return {
      ...arrays(batch),
      done: () => {
        settle();
        for (const p of batch) p.resolve();
      },
      giveBack: () => {
        settle();
        this.#queue.unshift(...batch);
        this.#pump();
      },
    };
  }

  #pump(): void {
    while (this.#inFlight < this.#maxInFlight && this.#queue.length > 0) {
      const batch = this.#queue.splice(0, this.#maxBatch);
      this.#inFlight++;
      this.#send(batch).finally(() => {
        this.#inFlight--;
        this.#pump();
      });
    }
  }

  async #send(batch: Pending[]): Promise<void> {
    if (batch.length > 1) {
      try {
        await completeTasks(this.#sql, batch, this.#timeoutMs);
        for (const p of batch) p.resolve();
        return;
      } catch {
        // Fall through: one by one, each completion gets its own answer.
      }
    }
    await Promise.all(
      batch.map((p) =>
        completeTask(this.#sql, p.task, p.output, this.#timeoutMs).then(p.resolve, p.reject)
      ),
    );
  }
}

function arrays(batch: readonly Pending[]): CompletionArrays {
  return {
    runIds: batch.map((p) => p.task.runId),
    stepSlugs: batch.map((p) => p.task.stepSlug),
    taskIndexes: batch.map((p) => p.task.taskIndex),
    outputs: batch.map((p) => p.output),
    attempts: batch.map((p) => p.task.attempt),
  };
}

/**
 * One `pgflow.complete_tasks` call. Outputs travel as JSON text cast `::text[]::jsonb[]`, so each
 * stays exactly what the handler returned (see completeTask).
 */
async function completeTasks(
  sql: Sql,
  batch: readonly Pending[],
  timeoutMs: number,
): Promise<void> {
  const a = arrays(batch);
  await bounded(
    sql`select count(*) from pgflow.complete_tasks(
      ${a.runIds as string[]}::uuid[],
      ${a.stepSlugs as string[]}::text[],
      ${a.taskIndexes as number[]}::integer[],
      ${a.outputs as string[]}::text[]::jsonb[],
      ${a.attempts as number[]}::integer[])`,
    "complete_tasks",
    timeoutMs,
  );
}
