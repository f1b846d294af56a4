import type { Sql } from "../platform/types.ts";
import type { Json } from "../dsl/json.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import { parseJsonb } from "../util/json_parse.ts";
import { DEFAULT_MAX_PAYLOAD_BYTES, PayloadTooLarge } from "../util/payload_limit.ts";

interface Entry {
  input: Promise<Json>;
  /** Bytes of its JSON text, when known (0 until a load has said). */
  bytes: number;
}

/**
 * Run inputs by run id, loaded once and shared: concurrent tasks of one run make one query. The
 * cache is bounded (least recently used entries go first) by count and by the bytes of the
 * inputs' JSON text, so a long-lived worker does not grow without limit, nor hold many large
 * inputs no task needs any more. An input over `maxBytes` is not loaded at all: reading it fails
 * with a `PayloadTooLarge` error.
 */
export class FlowInputCache {
  readonly #entries = new Map<string, Entry>();
  readonly #sql: Sql;
  readonly #capacity: number;
  readonly #timeoutMs: number;
  readonly #maxBytes: number;
  #bytes = 0;

  /**
   * @param sql the pool to load inputs with
   * @param capacity how many runs to remember
   * @param timeoutMs bound of each load (see `bounded`)
   * @param maxBytes the largest input loaded, and the most bytes of inputs remembered
   */
  constructor(
    sql: Sql,
    capacity = 500,
    timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
    maxBytes: number = DEFAULT_MAX_PAYLOAD_BYTES,
  ) {
    this.#sql = sql;
    this.#capacity = capacity;
    this.#timeoutMs = timeoutMs;
    this.#maxBytes = maxBytes;
  }

  /** Seeds the cache with an input already known (a root task's input is the run input). */
  seed(runId: string, input: Json, bytes = 0): void {
    this.#remember(runId, { input: Promise.resolve(input), bytes });
  }

  /** The run's input, from the cache or loaded once. */
  get(runId: string): Promise<Json> {
    const hit = this.#entries.get(runId);
    if (hit !== undefined) {
      this.#remember(runId, hit);
      return hit.input;
    }
    const entry: Entry = { input: Promise.resolve(null), bytes: 0 };
    const loading = this.#load(runId, entry);
    entry.input = loading;
    this.#remember(runId, entry);
    // A failed load is forgotten so the next caller tries again.
    loading.catch(() => {
      if (this.#entries.get(runId) === entry) this.#forget(runId);
    });
    return loading;
  }

  /** How many runs are cached. */
  get size(): number {
    return this.#entries.size;
  }

  /** Bytes of JSON text of the cached inputs whose size is known. */
  get bytes(): number {
    return this.#bytes;
  }

  /**
   * As text, read by `parseJsonb` (exact keys and numbers, whatever the pool's parsers); an input
   * over the bound stays in the database (only its size is sent).
   */
  async #load(runId: string, entry: Entry): Promise<Json> {
    const rows = await bounded(
      this.#sql<{ input: string | null; bytes: number }[]>`
        select case when octet_length(t.input) <= ${this.#maxBytes}::integer then t.input end
                 as input,
               octet_length(t.input) as bytes
        from pgflow.runs r cross join lateral (select r.input::text offset 0) as t(input)
        where r.run_id = ${runId}::uuid`,
      "load run input",
      this.#timeoutMs,
    );
    if (rows.length === 0) throw new Error(`run ${runId} does not exist`);
    const { input, bytes } = rows[0];
    if (input === null) throw new PayloadTooLarge(`input of run ${runId}`, bytes, this.#maxBytes);
    if (this.#entries.get(runId) === entry) {
      entry.bytes = bytes;
      this.#bytes += bytes;
      this.#evict();
    }
    return parseJsonb(input);
  }

  #remember(runId: string, entry: Entry): void {
    // Map keeps insertion order: re-inserting marks an entry as most recently used.
    if (this.#entries.get(runId) === entry) this.#entries.delete(runId);
    else {
      this.#forget(runId);
      this.#bytes += entry.bytes;
    }
    this.#entries.set(runId, entry);
    this.#evict();
  }

  #forget(runId: string): void {
    const entry = this.#entries.get(runId);
    if (entry === undefined) return;
    this.#bytes -= entry.bytes;
    this.#entries.delete(runId);
  }

  /** Drops the least recently used entries beyond the bounds; the newest always stays. */
  #evict(): void {
    while (
      this.#entries.size > this.#capacity ||
      (this.#entries.size > 1 && this.#bytes > this.#maxBytes)
    ) {
      this.#forget(this.#entries.keys().next().value!);
    }
  }
}
