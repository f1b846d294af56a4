/**
 * A claim's plan is driven by its message ids, whatever the statistics say. The statistics of a
 * young database are taken before its first burst, when no task is queued and no step state or
 * run is started; a plan made on them once joined runs and step states by status, scanned every
 * started step state and looked every message up once for each (10 tasks claimed in 80 ms from a
 * 3,000-run burst), for as long as the session kept that plan. A database whose small tables
 * autovacuum has just vacuumed and analysed is no different: its statistics say a scan is cheapest.
 * Counted with the transaction's own table statistics (pg_stat_xact_user_tables), which do not
 * depend on timing.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Access {
  relname: string;
  seq_tup_read: number;
  idx_tup_fetch: number;
}

async function claimAll(sql: Sql, queue: string, worker: string, qty: number): Promise<number> {
  const rows = await sql`
    select run_id, step_slug, task_index, attempt from pgflow.read_and_claim(
      ${queue}, ${worker}::uuid, 30, ${qty}, 0) where disposition = 'claimed'`;
  for (const r of rows) {
    await sql`select pgflow.complete_task(${r.run_id}::uuid, ${r.step_slug}, ${r.task_index}::int,
                                          '{}'::jsonb, ${r.attempt}::int)`;
  }
  return rows.length;
}

async function burstAfterQuietStart(
  sql: Sql,
  connect: () => Sql,
  flow: string,
  queue: string,
  vacuumed: boolean,
): Promise<void> {
  await defineFlow(sql, flow, [{ slug: "a", queue }], { mode: "routed" });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, ${queue}, 'test_fn', ${
    JSON.stringify([[flow, "a"]])
  }::text::jsonb)`;
  // The worker's session claims while the tables are small: plpgsql caches its statements'
  // plans per session, and after five calls keeps a generic plan, made for tables that size,
  // until something invalidates it (an ANALYZE, which autovacuum runs at most once a minute).
  let workerSql = connect();
  const quietRounds = async () => {
    for (let i = 0; i < 8; i++) {
      await sql`select count(pgflow.start_flow(${flow}, '{}'::jsonb)) from generate_series(1, 5)`;
      assert.equal(await claimAll(workerSql, queue, worker, 5), 5);
    }
  };
  await quietRounds();
  if (vacuumed) {
    // Statistics that say how small the tables really are, and a session that plans on them.
    await sql`vacuum analyze pgflow.runs, pgflow.step_states, pgflow.step_tasks`;
    workerSql = connect();
    await quietRounds();
  }

  // The burst.
  await sql`select count(pgflow.start_flow(${flow}, '{}'::jsonb)) from generate_series(1, 1500)`;

  const batch = 10;
  for (let round = 0; round < 3; round++) {
    const access = await workerSql.begin(async (tx) => {
      // The counters of this backend not yet flushed (a flush is at most once a second, so they
      // may include earlier transactions): the claim's share is the difference.
      const counters = () =>
        tx<Access[]>`
          select relname, coalesce(seq_tup_read, 0)::int as seq_tup_read,
                 coalesce(idx_tup_fetch, 0)::int as idx_tup_fetch
          from pg_stat_xact_user_tables
          where schemaname = 'pgflow' and relname in ('runs', 'step_states', 'step_tasks')
          order by relname`;
      const before = await counters();
      const claimed = await tx`
        select 1 from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, ${batch}, 0)
        where disposition = 'claimed'`;
      assert.equal(claimed.length, batch);
      const after = await counters();
      return after.map((a) => {
        const b = before.find((x) => x.relname === a.relname);
        return {
          relname: a.relname,
          seq_tup_read: a.seq_tup_read - (b?.seq_tup_read ?? 0),
          idx_tup_fetch: a.idx_tup_fetch - (b?.idx_tup_fetch ?? 0),
        };
      });
    });
    // Per claimed task: its task by message id and again by row version, its run and step
    // state, and the result's lookups; a few rows each, never the 1,500 runs' rows.
    for (const a of access) {
      assert.ok(
        a.seq_tup_read + a.idx_tup_fetch <= 5 * batch,
        `round ${round}: ${a.relname} read ${a.seq_tup_read} rows by scan and ${a.idx_tup_fetch} by index for a batch of ${batch}`,
      );
    }
  }
}

db.test("a burst after a quiet start: the claim reads only its batch's rows", async ({ sql, connect }) => {
  await burstAfterQuietStart(sql, connect, "cp_burst", "cp_q", false);
});

db.test("a burst after autovacuum analysed small tables: the claim reads only its batch's rows", async ({ sql, connect }) => {
  await burstAfterQuietStart(sql, connect, "cp_vacuumed", "cp_vq", true);
});
