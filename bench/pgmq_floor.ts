/**
 * The floor: raw PGMQ on the same database with no claim, no handler dispatch and no state, done
 * the cheapest honest way: prepared statements, a read of a whole batch (`read_with_poll`, the
 * benchmark's batch size) and the whole batch archived in one call (`pgmq.archive(queue,
 * bigint[])`). {@link FLOOR_LOOPS} such loops run at once, each on its own connection, so one
 * batch is read while another is archived, as a worker overlaps its reads and completions. It is
 * the speed the engine is to aim at.
 */
import postgres from "postgres";
import { sleep } from "./clock.ts";
import { wallMs } from "./clock.ts";
import type { EngineSettings } from "./engine.ts";

/** The queue the floor uses. */
export const FLOOR_QUEUE = "bench_raw";

/** Read → archive loops running at once. */
export const FLOOR_LOOPS = 2;

/** A raw consumer of {@link FLOOR_QUEUE}: `FLOOR_LOOPS` loops on a pool of their own. */
export class FloorConsumer {
  readonly #sql: postgres.Sql;
  readonly #s: EngineSettings;
  #stopped = false;
  #loops: Promise<void>[] = [];
  /** Messages archived so far. */
  archived = 0;
  /** Wall ms of the first non-empty read and of the last archive. */
  first = NaN;
  last = NaN;
  /** Called per message read: its enqueued_at (wall ms) and the read's time. */
  onRead: ((enqueuedMs: number, readAt: number) => void) | undefined;

  constructor(s: EngineSettings) {
    this.#s = s;
    this.#sql = postgres(s.url, { max: FLOOR_LOOPS, prepare: true, onnotice: () => {} });
  }

  /** Starts the loops. */
  start(): void {
    this.#loops = Array.from({ length: FLOOR_LOOPS }, () => this.#loop());
  }

  async #loop(): Promise<void> {
    const s = this.#s;
    // A short poll so that stop() is not held up by a long read_with_poll.
    const pollSeconds = Math.min(1, s.maxPollSeconds);
    while (!this.#stopped) {
      const rows = await this.#sql<{ id: string; ms: number }[]>`
        select msg_id::text as id, extract(epoch from enqueued_at)::float8 * 1000 as ms
        from pgmq.read_with_poll(${FLOOR_QUEUE}, 30, ${s.batchSize}::integer,
                                 ${pollSeconds}::integer, ${s.pollIntervalMs}::integer)`;
      if (rows.length === 0) continue;
      const at = wallMs();
      if (Number.isNaN(this.first)) this.first = at;
      for (const row of rows) this.onRead?.(row.ms + s.offsetMs, at);
      await this.#sql`select pgmq.archive(${FLOOR_QUEUE}, ${rows.map((r) => r.id)}::bigint[])`;
      this.archived += rows.length;
      this.last = wallMs();
    }
  }

  /** Forgets the window, before a new backlog. */
  resetWindow(): void {
    this.first = this.last = NaN;
  }

  /** Resolves once `n` messages in all are archived. */
  async waitFor(n: number, timeoutMs = 300_000): Promise<void> {
    const deadline = wallMs() + timeoutMs;
    while (this.archived < n) {
      if (wallMs() > deadline) throw new Error(`raw loop archived ${this.archived} of ${n}`);
      await sleep(10);
    }
  }

  /** Stops the loops and closes the pool. */
  async stop(): Promise<void> {
    this.#stopped = true;
    await Promise.all(this.#loops);
    await this.#sql.end({ timeout: 5 });
  }
}

/** Sends `n` messages to the floor's queue in one statement (one commit). */
export async function sendFloorBacklog(sql: postgres.Sql, n: number): Promise<void> {
  await sql`
    select count(*) from pgmq.send_batch(${FLOOR_QUEUE},
      array(select '{}'::jsonb from generate_series(1, ${n}::integer)))`;
}

/** Send → read ms of `s.latencyTasks` messages sent one by one at `s.rate` per second. */
export async function floorLatencies(
  s: EngineSettings,
  consumer: FloorConsumer,
): Promise<number[]> {
  const latencies: number[] = [];
  const before = consumer.archived;
  consumer.onRead = (sent, at) => latencies.push(at - sent);
  const t0 = wallMs();
  for (let i = 0; i < s.latencyTasks; i++) {
    const wait = t0 + (i * 1000) / s.rate - wallMs();
    if (wait > 0) await sleep(wait);
    await s.sql`select pgmq.send(${FLOOR_QUEUE}, '{}'::jsonb)`;
  }
  await consumer.waitFor(before + s.latencyTasks);
  consumer.onRead = undefined;
  return latencies;
}
