/**
 * Rate limits hold exactly across processes (docs/flow-control.md, Rate limits): four workers in
 * two processes (tests/support/fixtures/rate_workers.ts) claim and complete 2,000 tasks of 50 keys
 * limited to 4 starts per second, while one process is SIGKILLed now and then (its connections
 * drop: a claim or completion in flight is lost) and started again, and stalled recovery takes
 * its workers' tasks back. From every start time recorded (each task's last start, and every
 * start a recovery took back), no key has more than 4 starts in any one-second window; every task
 * completes exactly once.
 */
import assert from "node:assert/strict";
import { fileURLToPath as fromFileUrl } from "node:url";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const TASKS = 2000;
const KEYS = 50;
const LIMIT = 4;
const SCRIPT = fromFileUrl(new URL("../support/fixtures/rate_workers.ts", import.meta.url));

db.test("no key starts more than its rate limit in any window, while a worker process is SIGKILLed and recovered", async ({ sql, url }) => {
  await defineFlow(sql, "rx", [{ slug: "s", queue: "rx_q", type: "map" }], {
    mode: "routed",
    timeout: 3,
    // Kills land while the victim holds tasks, and a recovered task may go to the next victim:
    // a task can be taken back several times, and each recovery counts an attempt.
    maxAttempts: 20,
  });
  await sql`select pgflow.set_step_rate_limit('rx', 's', ${LIMIT}, interval '1 second', '$.k', 'input')`;
  await sql`create table rl_done (run_id uuid not null, task_index integer not null)`;
  // The starts stalled recovery takes back: their started_at is moved an hour back below, so it
  // is kept here first.
  await sql`create table rl_taken_back (run_id uuid, task_index integer, key text, started_at timestamptz)`;
  const per = TASKS / 10;
  for (let r = 0; r < 10; r++) {
    const items = Array.from({ length: per }, (_, i) => ({ k: `key${(r * per + i) % KEYS}` }));
    await sql`select pgflow.start_flow('rx', ${sql.json(items)})`;
  }

  // The victim holds each batch 50 ms before completing it, so a kill finds started tasks.
  const spawn = (fn: string, holdMs: number) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", SCRIPT, url, "rx_q", "rx", "2", fn, String(holdMs)],
      stdout: "null",
      stderr: "inherit",
    }).spawn();
  const steady = spawn("steady", 0);
  let generation = 0;
  let victim = spawn(`victim${generation}`, 50);
  let kills = 0;
  let done = false;

  // The started tasks of every killed victim are recovered as stalled (time moved on past their
  // timeout, their start kept first). Not only the last one's: a killed process's backend can
  // still commit a claim after its client is gone, and that task must be taken back too.
  const recoverDead = async () => {
    await sql`with dead as (
        select t.run_id, t.step_slug, t.task_index, t.rate_key, t.started_at from pgflow.step_tasks t
        join pgflow.workers w on w.worker_id = t.last_worker_id
        where t.status = 'started' and w.function_name like 'victim%'
          and w.function_name <> ${`victim${generation}`}
          -- Not one moved back already (by the other caller: the killer and the wait both call).
          and t.started_at > now() - interval '30 minutes'
        for update of t),
      kept as (insert into rl_taken_back select run_id, task_index, rate_key, started_at from dead)
      update pgflow.step_tasks t set started_at = now() - interval '1 hour'
      from dead d
      where t.run_id = d.run_id and t.step_slug = d.step_slug and t.task_index = d.task_index`;
    await sql`select pgflow.requeue_stalled_tasks()`;
  };

  // Every ~2 s the victim process is SIGKILLed and a new one started.
  const killer = (async () => {
    while (!done) {
      await new Promise((r) => setTimeout(r, 2000));
      // On a busy machine a new process can take longer than that to start: kill it once it holds
      // started tasks, so every kill is one that recovery must clean up after.
      while (!done) {
        const [{ holds }] = await sql`select exists (
            select 1 from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id
            where t.status = 'started' and w.function_name = ${`victim${generation}`}) as holds`;
        if (holds) break;
        await new Promise((r) => setTimeout(r, 20));
      }
      if (done) break;
      victim.kill("SIGKILL");
      await victim.status;
      kills++;
      generation++;
      victim = spawn(`victim${generation}`, 50);
      await recoverDead();
    }
  })();

  const started = Date.now();
  for (;;) {
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs where status = 'started'`;
    if (n === 0) break;
    assert.ok(Date.now() - started < 300_000, `${n} runs still unfinished after 5 minutes`);
    await new Promise((r) => setTimeout(r, 200));
    if (Date.now() - started > 20_000) await recoverDead();
  }
  done = true;
  await killer;
  victim.kill("SIGKILL");
  steady.kill("SIGKILL");
  await Promise.all([victim.status, steady.status]);

  assert.ok(kills > 0, "a worker process was killed during the run");
  const [{ taken }] = await sql`select count(*)::int as taken from rl_taken_back`;
  assert.ok(taken > 0, "killed workers held started tasks, and recovery took them back");
  // Every start, and per start the starts of its key in the second up to it.
  const [w] = await sql`
    with starts as (
      select rate_key as key, started_at from pgflow.step_tasks where flow_slug = 'rx'
      union all
      select key, started_at from rl_taken_back
    )
    select max(n)::int as max_in_window, count(*)::int as starts from (
      select count(*) over (partition by key order by started_at
                            range between interval '999999 microseconds' preceding and current row) as n
      from starts) x`;
  assert.equal(w.starts, TASKS + taken);
  assert.ok(
    w.max_in_window <= LIMIT,
    `a key started ${w.max_in_window} tasks within one second (limit ${LIMIT})`,
  );
  assert.equal(w.max_in_window, LIMIT, "the limit was reached: the workers were busy enough");
  const [t] = await sql`select count(*) filter (where status = 'completed')::int as completed,
                               count(*)::int as total from pgflow.step_tasks where flow_slug = 'rx'`;
  const unfinished = await sql`
    select t.run_id, t.task_index, t.status, t.attempts_count, t.uncounted_attempts, t.not_before,
           r.status as run_status, r.error_message,
           (select jsonb_agg(jsonb_build_object('attempt', a.attempt, 'outcome', a.outcome,
                                                'error', left(a.error_message, 120)) order by a.attempt)
            from pgflow.task_attempts a where a.run_id = t.run_id and a.task_index = t.task_index) as attempts
    from pgflow.step_tasks t join pgflow.runs r using (run_id)
    where t.flow_slug = 'rx' and t.status <> 'completed' limit 5`;
  assert.deepEqual(
    [t.completed, t.total],
    [TASKS, TASKS],
    `nothing lost; not completed: ${JSON.stringify(unfinished)}`,
  );
  const [d] =
    await sql`select count(*)::int as n, count(distinct (run_id, task_index))::int as distinct_n
                        from rl_done`;
  assert.deepEqual([d.n, d.distinct_n], [TASKS, TASKS], "every task completed once, none twice");
  const elapsed = (Date.now() - started) / 1000;
  console.log(
    `rate-limit exact: ${TASKS} tasks, ${KEYS} keys, ${LIMIT}/s: ${elapsed.toFixed(1)} s ` +
      `(ideal ${TASKS / KEYS / LIMIT} s), ${kills} kills, ${taken} starts taken back, ` +
      `max ${w.max_in_window} in any 1 s window`,
  );
});
