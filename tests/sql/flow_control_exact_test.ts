/**
 * Concurrency limits hold exactly across workers (docs/flow-control.md, Exactness): four workers,
 * each on its own connection, claim and complete thousands of tasks of hundreds of keys limited
 * to 3 while a separate connection counts the started tasks of every key from the task rows every
 * 10 ms; workers die mid-batch (their backend terminated, so a completion in flight is lost) and
 * their tasks are taken back by stalled recovery. No key ever has more than 3 started, and every
 * task completes exactly once.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const TASKS = 2000;
const KEYS = 100;
const LIMIT = 3;
const WORKERS = 4;

db.test("a key limited to 3 never has more than 3 tasks started, while workers die and are recovered", async ({ sql, connect }) => {
  await defineFlow(sql, "exact", [{ slug: "s", queue: "exact_q", type: "map" }], {
    mode: "routed",
    timeout: 3,
  });
  await sql`select pgflow.set_step_flow_control('exact', 's', concurrency => ${LIMIT},
    concurrency_key => '$.k', concurrency_key_from => 'input')`;
  // Ten runs of 200 map tasks: keys spread over every run.
  const per = TASKS / 10;
  for (let r = 0; r < 10; r++) {
    const items = Array.from({ length: per }, (_, i) => ({ k: `key${(r * per + i) % KEYS}` }));
    await sql`select pgflow.start_flow('exact', ${sql.json(items)})`;
  }
  const [{ waiting }] = await sql`select count(*)::int as waiting from pgflow.step_tasks
                                  where status = 'waiting'`;
  assert.equal(waiting, TASKS - KEYS * LIMIT, "all but 3 of each key wait");

  let done = false;
  let maxSeen = 0;
  let polls = 0;
  const poller = connect();
  const polling = (async () => {
    while (!done) {
      const [row] = await poller`select coalesce(max(n), 0)::int as m from (
        select count(*) as n from pgflow.step_tasks where status = 'started' group by limit_key) x`;
      maxSeen = Math.max(maxSeen, row.m);
      polls++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();

  const completions = new Map<string, number>();
  const dead = new Set<string>();
  let kills = 0;
  async function worker(n: number): Promise<void> {
    let conn: postgres.Sql = connect();
    let id = await registerWorker(conn, "exact_q");
    let batches = 0;
    while (!done) {
      const rows = await conn<
        { run_id: string; step_slug: string; task_index: number; attempt: number }[]
      >`select run_id, step_slug, task_index, attempt from pgflow.read_and_claim('exact_q', ${id}, 5, 10, 0, 50, '[["exact", "s"]]')
        where disposition = 'claimed'`;
      batches++;
      if (rows.length === 0) {
        await new Promise((r) => setTimeout(r, 5));
        continue;
      }
      // Now and then a worker dies holding its batch: its backend is terminated while the
      // completion is in flight, and a new worker takes its place.
      if (n < 2 && batches % 25 === 0) {
        const [{ pid }] = await conn`select pg_backend_pid() as pid`;
        const dying = conn`select pg_sleep(0.05), pgflow.complete_tasks(${
          rows.map((r) => r.run_id)
        }::uuid[],
          ${rows.map((r) => r.step_slug)}::text[], ${rows.map((r) => r.task_index)}::int[],
          ${rows.map(() => "1")}::jsonb[], ${rows.map((r) => r.attempt)}::int[])`.execute()
          // Handled at once: the termination may fail it before the next line's reply arrives.
          .catch(() => {});
        await sql`select pg_terminate_backend(${pid})`;
        await dying;
        await conn.end({ timeout: 1 }).catch(() => {});
        kills++;
        dead.add(id);
        conn = connect();
        id = await registerWorker(conn, "exact_q");
        continue;
      }
      const done_ = await conn<{ run_id: string; task_index: number }[]>`
        select run_id, task_index from pgflow.complete_tasks(${rows.map((r) => r.run_id)}::uuid[],
          ${rows.map((r) => r.step_slug)}::text[], ${rows.map((r) => r.task_index)}::int[],
          ${rows.map(() => "1")}::jsonb[], ${rows.map((r) => r.attempt)}::int[])`;
      for (const d of done_) {
        const k = `${d.run_id}/${d.task_index}`;
        completions.set(k, (completions.get(k) ?? 0) + 1);
      }
    }
  }

  // Stalled recovery, with time moved on for the dead workers' tasks (their timeout is 3 s + the
  // 30 s margin; the test does not wait that long).
  async function recovery(): Promise<void> {
    while (!done) {
      await sql`update pgflow.step_tasks set started_at = now() - interval '1 hour'
                where status = 'started' and last_worker_id = any (${[...dead]}::uuid[])`;
      await sql`select pgflow.requeue_stalled_tasks()`;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  const finished = (async () => {
    for (;;) {
      const [{ n }] =
        await sql`select count(*)::int as n from pgflow.runs where status = 'started'`;
      if (n === 0) break;
      await new Promise((r) => setTimeout(r, 200));
    }
    done = true;
  })();
  await Promise.all([
    ...Array.from({ length: WORKERS }, (_, i) => worker(i)),
    recovery(),
    finished,
  ]);
  await polling;

  assert.ok(kills > 0, "workers died during the run");
  assert.ok(polls > 50, `the poller checked often (${polls} times)`);
  assert.ok(maxSeen <= LIMIT, `a key had ${maxSeen} tasks started at once (limit ${LIMIT})`);
  assert.equal(maxSeen, LIMIT, "the limit was reached: the workers were busy enough to test it");
  const [t] = await sql`select count(*) filter (where status = 'completed')::int as completed,
                               count(*)::int as total from pgflow.step_tasks`;
  assert.deepEqual([t.completed, t.total], [TASKS, TASKS], "nothing lost");
  assert.ok([...completions.values()].every((c) => c === 1), "nothing completed twice");
});
