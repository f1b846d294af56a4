/**
 * pgflow.workers stays bounded and its hot reads stay indexed (issue 14, item 7), and worker
 * function names are validated where they are stored (item 9b).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

/** Inserts `count` old workers of one function and queue, last seen `age` ago. */
async function oldWorkers(sql: Sql, count: number, fn: string, queue: string, age: string) {
  await sql`insert into pgflow.workers (worker_id, queue_name, function_name, started_at, last_heartbeat_at, stopped_at)
            select gen_random_uuid(), ${queue}, ${fn}, now() - ${age}::interval, now() - ${age}::interval,
                   case when i % 2 = 0 then now() - ${age}::interval end
            from generate_series(1, ${count}) i`;
}

/**
 * Rows of pgflow.workers one statement read, from its transaction's own counters. A new connection
 * each time: a backend's counters also hold earlier transactions' not yet reported.
 */
async function workerRowsRead(fresh: Sql, statement: string): Promise<number> {
  try {
    return await fresh.begin(async (tx) => {
      await tx.unsafe(statement);
      const [r] = await tx`
        select coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) as n
        from pg_stat_xact_user_tables where relid = 'pgflow.workers'::regclass`;
      return Number(r.n);
    });
  } finally {
    await fresh.end();
  }
}

db.test("expired workers are pruned at registration and by prune_workers; live and busy ones stay", async ({ sql }) => {
  await defineFlow(sql, "ret", [{ slug: "a", queue: "ret_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('ret', '{}')`;
  // A worker that went silent long ago while holding a started task: kept until recovery.
  const busy = await registerWorker(sql, "ret_q", "ret_fn");
  await readAndStart(sql, "ret_q", busy, [["ret", "a"]]);
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '30 days',
                                      started_at = now() - interval '30 days'
            where worker_id = ${busy}`;
  await oldWorkers(sql, 250, "ret_fn", "ret_q", "8 days");
  await oldWorkers(sql, 5, "ret_fn", "ret_q", "6 days"); // inside the default 7 days
  assert.equal((await sql`select pgflow.worker_retention() as r`)[0].r, "7 days");

  // Each registration removes a bounded batch.
  await registerWorker(sql, "ret_q", "ret_fn");
  const count = async () => (await sql`select count(*)::int as n from pgflow.workers`)[0].n;
  assert.equal(await count(), 1 + 250 + 5 + 1 - 100);
  assert.equal((await sql`select pgflow.prune_workers() as n`)[0].n, 150);
  assert.equal(await count(), 1 + 5 + 1);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.workers where worker_id = ${busy}`)[0].n,
    1,
    "a worker holding a started task is kept",
  );

  // The retention setting: shorter retention prunes the 6-day-old rows too.
  assert.equal((await sql`select pgflow.set_worker_retention('2 days') as r`)[0].r, "2 days");
  assert.equal((await sql`select pgflow.prune_workers(2) as n`)[0].n, 2);
  assert.equal((await sql`select pgflow.prune_workers() as n`)[0].n, 3);
  await assert.rejects(
    () => sql`select pgflow.set_worker_retention('5 minutes')`,
    /retention must be at least 1 hour, got 00:05:00/,
  );
  assert.equal((await sql`select pgflow.set_worker_retention(null) as r`)[0].r, "7 days");

  // Once its task is done, the busy worker's row goes too; its task keeps the id of the worker
  // that ran it, as history.
  await sql`update pgflow.step_tasks set status = 'completed' where last_worker_id = ${busy}`;
  assert.equal((await sql`select pgflow.prune_workers() as n`)[0].n, 1);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.workers where worker_id = ${busy}`)[0].n,
    0,
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.step_tasks where flow_slug = 'ret' and last_worker_id = ${busy}`)[
      0
    ].n,
    1,
  );
});

db.test(
  "the keep-alive, coverage and fence reads touch only live workers, however long the history",
  async ({ sql, connect }) => {
    await defineFlow(sql, "hot", [{ slug: "a", queue: "hot_q" }], { mode: "routed" });
    await oldWorkers(sql, 20_000, "hot_fn", "hot_q", "1 hour");
    await registerWorker(sql, "hot_q", "hot_fn");
    await sql`analyze pgflow.workers`;
    const fence = (await sql`select pgflow.begin_deploy_fence('{hot_fn}') as id`)[0].id;
    await sql`select pgflow.end_deploy_fence(${fence})`;

    const keepAlive = await workerRowsRead(connect(), "select * from pgflow.ensure_workers()");
    const coverage = await workerRowsRead(
      connect(),
      "select * from pgflow.queue_coverage('hot_q')",
    );
    const status = await workerRowsRead(
      connect(),
      `select * from pgflow.deploy_fence_status(${fence})`,
    );
    assert.ok(keepAlive < 50, `ensure_workers read ${keepAlive} worker rows`);
    assert.ok(coverage < 50, `queue_coverage read ${coverage} worker rows`);
    assert.ok(status < 50, `deploy_fence_status read ${status} worker rows`);
  },
  { fresh: true },
);

db.test("function names the keep-alive would put into a URL are refused where they are stored", async ({ sql }) => {
  const bad = [
    "",
    "../admin",
    "a/b",
    "x?y=1",
    "has space",
    "dot.ted",
    "100%",
    "é",
    "a".repeat(129),
  ];
  for (const name of bad) {
    await assert.rejects(
      () => sql`select pgflow.register_worker(gen_random_uuid(), 'fn_q', ${name})`,
      /register_worker: invalid function name/,
      JSON.stringify(name),
    );
    await assert.rejects(
      () => sql`select pgflow.begin_deploy_fence(${[name]}::text[])`,
      /begin_deploy_fence: invalid function name\(s\)/,
      JSON.stringify(name),
    );
    await assert.rejects(
      () => sql`insert into pgflow.worker_functions (function_name) values (${name})`,
      /violates check constraint "worker_functions_name_is_valid"/,
    );
    await assert.rejects(
      () =>
        sql`insert into pgflow.workers (worker_id, queue_name, function_name) values (gen_random_uuid(), 'q', ${name})`,
      /violates check constraint "workers_function_name_is_valid"/,
    );
  }
  for (const name of ["thread_processing", "slack-delivery", "A1", "9lives", "a".repeat(128)]) {
    await sql`select pgflow.register_worker(gen_random_uuid(), 'fn_q', ${name})`;
  }
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.worker_functions where function_name !~ '^[A-Za-z0-9_-]{1,128}$'`)[
      0
    ].n,
    0,
  );
});
