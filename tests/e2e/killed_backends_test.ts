/**
 * A worker process whose database connections are terminated over and over (pg_terminate_backend,
 * as an operator, a failover or a pooler restart does) stays alive and finishes its runs with no
 * manual action. postgres.js 3.4.7 fetches array types on every new connection without handling
 * that query's failure, so a backend killed during the fetch used to reject a promise nothing
 * awaits, and Deno exits on an unhandled rejection (src/platform/type_fetch_guard.ts).
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun } from "../worker/helpers.ts";
import { killChild, spawnDeno } from "./process.ts";

const db = testDatabase(import.meta.url);
const script = new URL("./fixtures/kill_storm_worker.ts", import.meta.url).pathname;
const APP = "pgflow_kill_storm";

db.test("a worker survives 60 killed backends and finishes every run", async ({ sql, url }) => {
  const child = spawnDeno(script, { DATABASE_URL: url, PGAPPNAME: APP });
  let exit: Deno.CommandStatus | undefined;
  child.process.status.then((s) => exit = s);
  const alive = () => {
    if (exit) {
      assert.fail(`the worker process exited with code ${exit.code}; output:\n${child.output()}`);
    }
  };
  try {
    await waitFor(
      () =>
        sql`select 1 from pgflow.workers where queue_name = 'kill_storm'`.then((r) => r.length > 0),
      { what: `the worker to register; output:\n${child.output()}`, timeoutMs: 60_000 },
    );
    const runs: string[] = [];
    let killed = 0;
    let inTypeFetch = 0;
    const started = Date.now();
    // Kill every connection of the worker as soon as it appears (so many kills land during
    // postgres.js's array-type fetch on a fresh connection) for 400 ms, then let the worker work
    // for 400 ms (so its poll succeeds and its backoff resets), starting runs meanwhile; until 60
    // backends were terminated. (A busy machine slows the worker's reconnects, so fewer kills land
    // per round: the bound only stops a worker that never reconnects.)
    while (killed < 60 && Date.now() - started < 180_000) {
      alive();
      if (runs.length < 30) runs.push(await startRun(sql, "kill_storm", { n: runs.length }));
      const phase = Date.now();
      while (Date.now() - phase < 400) {
        const rows = await sql<{ fetching: boolean; ok: boolean }[]>`
          select state = 'active' and query ~ 'b\.typarray' as fetching,
                 pg_terminate_backend(pid) as ok from pg_stat_activity
          where datname = current_database() and application_name = ${APP}
            and pid <> pg_backend_pid()`;
        killed += rows.filter((r) => r.ok).length;
        inTypeFetch += rows.filter((r) => r.ok && r.fetching).length;
        await new Promise((r) => setTimeout(r, Math.random() * 5));
      }
      await new Promise((r) => setTimeout(r, 400));
    }
    alive();
    // A claim whose reply was lost leaves its task started until stalled recovery (timeout + 30 s):
    // age such tasks instead of waiting.
    await waitFor(async () => {
      alive();
      await sql`update pgflow.step_tasks set started_at = started_at - interval '1 minute'
                where flow_slug = 'kill_storm' and status = 'started'
                  and started_at < now() - interval '5 seconds'`;
      const [{ left }] = await sql<{ left: number }[]>`
        select count(*)::int as left from pgflow.runs
        where flow_slug = 'kill_storm' and status <> 'completed'`;
      return left === 0;
    }, {
      what: `every run to complete; output:\n${child.output().slice(-4000)}`,
      timeoutMs: 90_000,
      intervalMs: 250,
    });
    const outputs = await sql<{ output: { double: number[] } }[]>`
      select output from pgflow.runs where run_id = any(${runs}::uuid[]) order by (input->>'n')::int`;
    assert.deepEqual(
      outputs.map((r) => r.output.double),
      runs.map((_, n) => [0, 1, 2].map((i) => (n * 10 + i) * 2)),
    );
    alive();
    assert.ok(killed >= 60, `only ${killed} backends were terminated`);
    console.log(
      `killed ${killed} backends (${inTypeFetch} during the type fetch), ${runs.length} runs`,
    );
  } finally {
    await killChild(child, "SIGTERM");
  }
});
