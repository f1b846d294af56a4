import type { Sql } from "../platform/types.ts";
import type { Json } from "../dsl/json.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { parseJsonb } from "../util/json_parse.ts";

/**
 * Run inputs by run id, loaded once and shared: concurrent tasks of one run make one query. The
 * cache is bounded (least recently used entries go first) so a long-lived worker does not grow
 * without limit.
 */
export class FlowInputCache {
  readonly #entries = new Map<string, Promise<Json>>();
  readonly #sql: Sql;
  readonly #capacity: number;
  readonly #timeoutMs: number;

  /**
   * @param sql the pool to load inputs with
   * @param capacity how many runs to remember
   * @param timeoutMs bound of each load (see `bounded`)
   */
  constructor(sql: Sql, capacity = 500, timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS) {
    this.#sql = sql;
    this.#capacity = capacity;
    this.#timeoutMs = timeoutMs;
  }

  /** Seeds the cache with an input already known (a root task's input is the run input). */
  seed(runId: string, input: Json): void {
    this.#remember(runId, Promise.resolve(input));
  }

  /** The run's input, from the cache or loaded once. */
  get(runId: string): Promise<Json> {
    const hit = this.#entries.get(runId);
    if (hit !== undefined) {
      this.#remember(runId, hit);
      return hit;
    }
    const loading = this.#load(runId);
    this.#remember(runId, loading);
    // A failed load is forgotten so the next caller tries again.
    loading.catch(() => {
      if (this.#entries.get(runId) === loading) this.#entries.delete(runId);
    });
    return loading;
  }

  /** How many runs are cached. */
  get size(): number {
    return this.#entries.size;
  }

  /** As text, read by `parseJsonb` (exact keys and numbers, whatever the pool's parsers). */
  async #load(runId: string): Promise<Json> {
    const rows = await bounded(
      this.#sql<{ input: string }[]>`
        select input::text as input from pgflow.runs where run_id = ${runId}::uuid`,
      "load run input",
      this.#timeoutMs,
    );
    if (rows.length === 0) throw new Error(`run ${runId} does not exist`);
    return parseJsonb(rows[0].input);
  }

  #remember(runId: string, value: Promise<Json>): void {
    // Map keeps insertion order: re-inserting marks an entry as most recently used.
    this.#entries.delete(runId);
    this.#entries.set(runId, value);
    while (this.#entries.size > this.#capacity) {
      this.#entries.delete(this.#entries.keys().next().value!);
    }
  }
}
