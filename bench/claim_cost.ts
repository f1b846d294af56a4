/**
 * Claim cost: how long one `pgflow.start_tasks` call takes (with the round trip and the rows
 * read back, as a worker pays them)
 * against the size of the support set and the batch size. The support set holds the one real
 * pair plus made-up pairs, as a worker of many flows has. Each size is registered as its own
 * worker and claimed with `supported => NULL`, exactly as a running worker claims.
 */
import postgres from "postgres";
import type { SupportedPair } from "../mod.ts";
import { ensureFlowCompiled } from "../tools.ts";
import { wallMs } from "./clock.ts";
import { singleStep } from "./flows.ts";
import { startBacklog } from "./load.ts";
import { median, percentile } from "./stats.ts";

/** Support-set sizes and batch sizes measured. */
export const PAIRS = [1, 100, 1000] as const;
export const BATCHES = [1, 10, 100] as const;

/** One (pairs, batch) cell. */
export interface ClaimCell {
  readonly pairs: number;
  readonly batch: number;
  readonly calls: number;
  /** Median and p95 milliseconds per call. */
  readonly p50: number;
  readonly p95: number;
}

const QUEUE = "bench_claim";

function supportSet(size: number): SupportedPair[] {
  const fakes = Array.from(
    { length: size - 1 },
    (_, i) => [`bench_claim_other_${i}`, "work"] as const,
  );
  // The real pair last: a linear scan would pay for every made-up pair before it.
  return [...fakes, [QUEUE, "work"]];
}

/** Measures every cell; `scale` (0..1] shrinks the repetitions for --quick. */
export async function measureClaimCost(url: string, scale: number): Promise<ClaimCell[]> {
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    const flow = singleStep(QUEUE);
    const compiled = await ensureFlowCompiled(sql, flow);
    if (compiled.status === "mismatch") throw new Error(compiled.differences.join("; "));
    const workers = new Map<number, string>();
    for (const n of PAIRS) {
      const workerId = crypto.randomUUID();
      await sql`select pgflow.register_worker(${workerId}::uuid, ${QUEUE}, 'bench',
                                              ${JSON.stringify(supportSet(n))}::text::jsonb)`;
      workers.set(n, workerId);
    }
    const cells: ClaimCell[] = [];
    for (const batch of BATCHES) {
      const reps = Math.max(5, Math.round(Math.min(60, 2000 / batch) * scale));
      // One warm-up call per support set, then the timed ones.
      await startBacklog(sql, [QUEUE], (reps + 1) * batch * PAIRS.length);
      const times = new Map<number, number[]>(PAIRS.map((n) => [n, []]));
      for (let rep = 0; rep <= reps; rep++) {
        // Rotating the order spreads any drift (vacuum, cache) over every support-set size.
        const order = PAIRS.map((_, i) => PAIRS[(i + rep) % PAIRS.length]);
        for (const pairs of order) {
          const ids = await sql<{ id: string }[]>`
            select msg_id::text as id from pgmq.read(${QUEUE}, 300, ${batch})`;
          const t0 = wallMs();
          const result = await claimTasks(sql, ids.map((r) => r.id), workers.get(pairs)!);
          const ms = wallMs() - t0;
          if (result.claimed.length !== batch) {
            throw new Error(`claim of ${batch} (pairs ${pairs}) claimed ${result.claimed.length}`);
          }
          if (rep > 0) times.get(pairs)!.push(ms);
        }
      }
      for (const pairs of PAIRS) {
        const t = times.get(pairs)!;
        cells.push({ pairs, batch, calls: t.length, p50: median(t), p95: percentile(t, 95) });
      }
      // Finish the claimed tasks so nothing is left started for stalled recovery to find.
      await sql`
        select count(*) from pgflow.step_tasks t
        cross join lateral pgflow.complete_task(t.run_id, t.step_slug, t.task_index, 'null'::jsonb,
                                               t.attempts_count) c
        where t.flow_slug = ${QUEUE} and t.status = 'started'`;
    }
    return cells;
  } finally {
    await sql.end();
  }
}

/**
 * One `pgflow.start_tasks` call on the benchmark queue against the set the worker registered,
 * every column read back. Ids travel as decimal strings cast to `bigint[]`.
 */
async function claimTasks(
  sql: postgres.Sql,
  messageIds: readonly string[],
  workerId: string,
): Promise<{ claimed: unknown[] }> {
  const rows = await sql<{ disposition: string }[]>`
    select message_id::text as msg_id, disposition, flow_slug, run_id, step_slug, task_index,
           input, attempt
    from pgflow.start_tasks(${QUEUE}, ${messageIds as string[]}::bigint[], ${workerId}::uuid, null)`;
  return { claimed: rows.filter((r) => r.disposition === "claimed") };
}
