/**
 * Producing work and waiting for it: a backlog sent in one transaction (for throughput) or runs
 * started one by one at a fixed rate (for pickup latency on an otherwise idle worker).
 */
import type postgres from "postgres";
import { sleep } from "./clock.ts";
import { wallMs } from "./clock.ts";

/** The database's `now()` as text: runs and tasks created after it have timestamps ≥ it. */
export async function dbNow(sql: postgres.Sql): Promise<string> {
  const [{ now }] = await sql<{ now: string }[]>`select clock_timestamp()::text as now`;
  return now;
}

/**
 * Starts `n` runs round-robin over `slugs` in one transaction: one commit makes all visible, so
 * workers never drain while the producer is still inserting (that would measure both at once).
 */
export async function startBacklog(sql: postgres.Sql, slugs: readonly string[], n: number) {
  await sql.begin(async (tx) => {
    // Statements of 5,000 runs keep each statement's memory bounded on large backlogs.
    for (let done = 0; done < n; done += 5000) {
      const count = Math.min(5000, n - done);
      await tx`
        select count(pgflow.start_flow((${slugs as string[]}::text[])[1 + (i % ${slugs.length}::integer)],
                                       '{}'::jsonb))
        from generate_series(${done}::integer, ${done + count - 1}::integer) i`;
    }
  });
}

/** Starts `n` runs round-robin over `slugs`, one transaction each, at `rate` runs per second. */
export async function startPaced(
  sql: postgres.Sql,
  slugs: readonly string[],
  n: number,
  rate: number,
): Promise<void> {
  const t0 = wallMs();
  for (let i = 0; i < n; i++) {
    const due = t0 + (i * 1000) / rate;
    const wait = due - wallMs();
    if (wait > 0) await sleep(wait);
    await sql`select 1 from pgflow.start_flow(${slugs[i % slugs.length]}, '{}'::jsonb)`;
  }
}

/** Waits until `expected` runs of `slugs` started since `since` are completed. */
export async function waitRunsCompleted(
  sql: postgres.Sql,
  slugs: readonly string[],
  since: string,
  expected: number,
  timeoutMs = 180_000,
  pollMs = 50,
): Promise<void> {
  const deadline = wallMs() + timeoutMs;
  for (;;) {
    const [{ n, failed }] = await sql<{ n: number; failed: number }[]>`
      select count(*) filter (where status = 'completed')::int as n,
             count(*) filter (where status = 'failed')::int as failed
      from pgflow.runs
      where flow_slug = any (${slugs as string[]}::text[]) and started_at >= ${since}::timestamptz`;
    if (failed > 0) throw new Error(`${failed} benchmark runs failed (${slugs[0]}…)`);
    if (n >= expected) return;
    if (wallMs() > deadline) {
      throw new Error(`only ${n} of ${expected} runs of ${slugs[0]}… completed in ${timeoutMs} ms`);
    }
    await sleep(pollMs);
  }
}

/** Tasks of `slugs` queued since `since`, and the busy window: first claim to last completion. */
export async function taskWindow(
  sql: postgres.Sql,
  slugs: readonly string[],
  since: string,
): Promise<{ tasks: number; seconds: number }> {
  const [row] = await sql<{ tasks: number; seconds: number }[]>`
    select count(*)::int as tasks,
           extract(epoch from max(completed_at) - min(started_at))::float8 as seconds
    from pgflow.step_tasks
    where flow_slug = any (${slugs as string[]}::text[]) and queued_at >= ${since}::timestamptz`;
  return row;
}

/** When each task of `slugs` queued since `since` was sent (wall ms after `offsetMs`), by key. */
export async function sendTimes(
  sql: postgres.Sql,
  slugs: readonly string[],
  since: string,
  offsetMs: number,
): Promise<Map<string, number>> {
  // queued_at and the message's enqueued_at are both now() of the sending transaction.
  const rows = await sql<{ key: string; ms: number }[]>`
    select queue_name || ':' || message_id as key,
           extract(epoch from queued_at)::float8 * 1000 as ms
    from pgflow.step_tasks
    where flow_slug = any (${slugs as string[]}::text[]) and queued_at >= ${since}::timestamptz`;
  return new Map(rows.map((r) => [r.key, r.ms + offsetMs]));
}
