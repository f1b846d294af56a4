import type postgres from "postgres";

/**
 * Latency pairs a database timestamp (when a message was sent: `now()` of the sending
 * transaction) with a JavaScript one (when a handler started). Both read this machine's wall
 * clock, but through different calls, so the offset between them is measured rather than assumed:
 * the database clock is read between two JavaScript readings, and the midpoint is taken.
 */

/** Wall-clock milliseconds with sub-millisecond resolution. */
export function wallMs(): number {
  return performance.timeOrigin + performance.now();
}

/** Milliseconds to add to a database epoch-ms reading to put it on the {@link wallMs} clock. */
export async function clockOffsetMs(sql: postgres.Sql, samples = 20): Promise<number> {
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < samples; i++) {
    const before = wallMs();
    const [{ ms }] = await sql<{ ms: number }[]>`
      select extract(epoch from clock_timestamp())::float8 * 1000 as ms`;
    const after = wallMs();
    // The sample with the shortest round trip brackets the database reading most tightly.
    if (after - before < best.rtt) {
      best = { rtt: after - before, offset: (before + after) / 2 - ms };
    }
  }
  return best.offset;
}

/** Resolves after `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
