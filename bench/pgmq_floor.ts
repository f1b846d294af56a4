/**
 * The floor: raw PGMQ on the same database with the worker's shape (a read of up to the free
 * slots, then one archive per message in its own slot, the same pool size), but no claim, no
 * handler dispatch and no state: send → read → archive. What the engine adds is measured against
 * this.
 */
import postgres from "postgres";
import { Slots } from "../src/util/slots.ts";
import { sleep } from "../src/util/backoff.ts";
import { wallMs } from "./clock.ts";
import type { EngineResult, EngineSettings } from "./engine.ts";
import { percentile } from "./stats.ts";

const QUEUE = "bench_raw";

async function consume(
  sql: postgres.Sql,
  s: EngineSettings,
  expected: number,
  onRead: (enqueuedMs: number, readAt: number) => void,
): Promise<{ first: number; last: number }> {
  const slots = new Slots(s.maxConcurrent);
  const never = new AbortController().signal;
  let read = 0;
  let first = NaN;
  let last = NaN;
  while (read < expected) {
    await slots.waitForFree(never);
    const qty = Math.min(s.batchSize, slots.free);
    const rows = await sql<{ id: string; ms: number }[]>`
      select msg_id::text as id, extract(epoch from enqueued_at)::float8 * 1000 as ms
      from pgmq.read_with_poll(${QUEUE}, 30, ${qty}::integer, ${s.maxPollSeconds}::integer,
                               ${s.pollIntervalMs}::integer)`;
    const at = wallMs();
    if (rows.length > 0 && Number.isNaN(first)) first = at;
    read += rows.length;
    for (const row of rows) {
      onRead(row.ms + s.offsetMs, at);
      slots.run(async () => {
        await sql`select pgmq.archive(${QUEUE}, ${row.id}::bigint)`;
        last = wallMs();
      });
    }
  }
  await slots.drain();
  return { first, last };
}

/** Raw PGMQ throughput (backlog) and send → read latency (paced sends). */
export async function measureFloor(s: EngineSettings): Promise<EngineResult> {
  const sql = postgres(s.url, { max: 4, prepare: false, onnotice: () => {} });
  try {
    await sql`select pgmq.create(${QUEUE})`;
    await sql`
      select count(*) from pgmq.send_batch(${QUEUE},
        array(select '{}'::jsonb from generate_series(1, ${s.tasks}::integer)))`;
    const window = await consume(sql, s, s.tasks, () => {});

    const latencies: number[] = [];
    const consuming = consume(sql, s, s.latencyTasks, (sent, at) => latencies.push(at - sent));
    const t0 = wallMs();
    for (let i = 0; i < s.latencyTasks; i++) {
      const wait = t0 + (i * 1000) / s.rate - wallMs();
      if (wait > 0) await sleep(wait);
      await s.sql`select pgmq.send(${QUEUE}, '{}'::jsonb)`;
    }
    await consuming;
    return {
      name: "raw PGMQ send → read → archive",
      tasks: s.tasks,
      tasksPerSec: s.tasks / ((window.last - window.first) / 1000),
      p50: percentile(latencies, 50),
      p95: percentile(latencies, 95),
    };
  } finally {
    await sql.end();
  }
}
