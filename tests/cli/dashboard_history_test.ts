/**
 * With a long history kept, the reads that list the newest runs or the latest failures read the
 * end of an index, not every run or step kept: with a million finished runs a sort of all of them
 * took the dashboard's run search 2.7 s (bench/history.md). Counted with the transaction's own
 * table statistics (pg_stat_xact_user_tables), which do not depend on timing.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { readOverview } from "../../src/cli/dashboard/queries.ts";
import type { ReadTx } from "../../src/cli/dashboard/read_only.ts";
import { searchRuns } from "../../src/cli/dashboard/search.ts";
import { defineFlow } from "../support/engine.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url);

const RUNS = 20_000;

/** `RUNS` finished runs of a one-step flow, one in 100 failed, started a minute apart. */
let loaded = false;
async function history(sql: Sql): Promise<void> {
  if (loaded) return;
  loaded = true;
  await defineFlow(sql, "hist_flow", [{ slug: "a" }]);
  await sql`
    with h as (
      select gen_random_uuid() as run_id, i % 100 = 0 as failed,
             now() - make_interval(mins => ${RUNS} - i) as t0
      from generate_series(1, ${RUNS}::int) i
    ), r as (
      insert into pgflow.runs (run_id, flow_slug, status, input, started_at, completed_at, failed_at)
      select run_id, 'hist_flow', case when failed then 'failed' else 'completed' end, '{}',
             t0, case when not failed then t0 + interval '1 s' end,
             case when failed then t0 + interval '1 s' end
      from h
    )
    insert into pgflow.step_states (run_id, flow_slug, step_slug, status, created_at,
                                    completed_at, failed_at, error_message)
    select run_id, 'hist_flow', 'a', case when failed then 'failed' else 'completed' end, t0,
           case when not failed then t0 + interval '1 s' end,
           case when failed then t0 + interval '1 s' end,
           case when failed then 'boom' end
    from h`;
  await sql`vacuum analyze pgflow.runs, pgflow.step_states`;
}

/** Rows `read` made the transaction fetch from runs and step_states, by scan or by index. */
async function rowsRead(
  sql: Sql,
  read: (tx: ReadTx) => Promise<unknown>,
): Promise<Record<string, number>> {
  return await sql.begin("read only", async (tx) => {
    // The counters are the session's not yet reported ones: earlier transactions on this
    // connection may be in them too, so the read's own count is a difference.
    const counts = async () =>
      Object.fromEntries(
        (await tx<{ relname: string; n: number }[]>`
          select relname, (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::int as n
          from pg_stat_xact_user_tables
          where schemaname = 'pgflow' and relname in ('runs', 'step_states')`)
          .map((r) => [r.relname, r.n]),
      );
    const before = await counts();
    await read(tx as unknown as ReadTx);
    const after = await counts();
    return Object.fromEntries(
      Object.entries(after).map(([k, n]) => [k, n - (before[k] ?? 0)]),
    );
  }) as Record<string, number>;
}

db.test("the run search reads the newest runs, not the whole history", async ({ sql }) => {
  await history(sql);
  const latest = await rowsRead(sql, (tx) => searchRuns(tx, { limit: 50 }));
  assert.ok(latest.runs <= 200, `latest 50 runs read ${latest.runs} rows of runs`);
  const failed = await rowsRead(sql, (tx) => searchRuns(tx, { status: "failed", limit: 50 }));
  // One run in 100 failed: the newest 50 are among the newest ~5,000 runs.
  assert.ok(failed.runs <= 6_000, `latest 50 failed runs read ${failed.runs} rows of runs`);
  const rows = await sql.begin(
    "read only",
    (tx) => searchRuns(tx as unknown as ReadTx, { status: "failed", limit: 3 }),
  );
  assert.equal(rows.length, 3);
  assert.ok(rows[0].startedAt > rows[1].startedAt && rows[1].startedAt > rows[2].startedAt);

  const listed = await rowsRead(
    sql,
    (tx) => tx`select count(*) from pgflow.list_runs(max_rows => 20)`,
  );
  assert.ok(listed.runs <= 200, `list_runs read ${listed.runs} rows of runs`);
});

db.test("the overview's recent failures read the latest failed steps only", async ({ sql }) => {
  await history(sql);
  const overview = await rowsRead(
    sql,
    (tx) => readOverview(tx, { staleAfterSeconds: 30, queuedAfterSeconds: 60, limit: 20 }),
  );
  assert.ok(
    overview.step_states <= 200,
    `the overview read ${overview.step_states} rows of step_states`,
  );
});
