/**
 * Schedules end to end, with real workers as the only tickers (no pg_cron): a schedule firing
 * every second for 60 s with two ticking workers, each restarted once, starts exactly one run per
 * second; and stopping every ticker for longer than the on-time window skips the older ticks by
 * the default policy, firing the ones still on time. The SQL tests (tests/sql/schedules_test.ts)
 * cover the same rules with faked time.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { Flow } from "../../mod.ts";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const flow = new Flow<{ at: string }>({ slug: "sch_e2e" })
  .step({ slug: "echo" }, (input) => input.at);

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Tick {
  tick: string;
  second: number;
  run_id: string | null;
  error: string | null;
  late_ms: number;
}

async function ticks(sql: postgres.Sql, name: string): Promise<Tick[]> {
  return await sql<Tick[]>`
    select to_char(tick_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as tick,
           extract(epoch from tick_at)::bigint as second, run_id, error,
           floor(extract(epoch from fired_at - tick_at) * 1000)::int as late_ms
    from pgflow.schedule_ticks where schedule_name = ${name} order by tick_at`;
}

db.test("every second for 60 s, two ticking workers each restarted once: one run per second", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const config = (tick: number) => ({ connectionString: url, scheduleTickIntervalMs: tick });
  try {
    const a = await startWorker(workers, flow, config(500));
    const b = await startWorker(workers, flow, config(700));
    await sql`select pgflow.create_schedule('sch_every_second', 'sch_e2e', every => '1 second',
                                            input => '{}', tick_key => 'at')`;
    const started = Date.now();
    // The scenario's own clock: restarts at 20 s and 40 s, the pause at 60 s.
    await sleep(20_000);
    await a.worker.stop();
    await startWorker(workers, flow, config(500));
    await sleep(40_000 - (Date.now() - started));
    await b.worker.stop();
    await startWorker(workers, flow, config(700));
    await sleep(60_000 - (Date.now() - started));
    await sql`select pgflow.pause_schedule('sch_every_second')`;

    const fired = await ticks(sql, "sch_every_second");
    // 60 s between creation and pause hold 60 whole seconds; 61 when the pause lands just after
    // a second turns and that tick was fired first, 59 when the creation's first tick and the
    // pause both fall at an edge. Never a gap or a second twice, whatever the count.
    assert.ok(fired.length >= 59 && fired.length <= 61, `${fired.length} ticks`);
    assert.equal(fired.at(-1)!.second - fired[0].second, fired.length - 1, "no second missing");
    assert.deepEqual(fired.filter((t) => t.run_id === null || t.error !== null), []);
    const [{ runs }] = await sql`
      select count(*)::int as runs from pgflow.runs where flow_slug = 'sch_e2e'`;
    assert.equal(runs, fired.length, "one run per tick, none without one");
    const [schedule] = await sql`
      select skipped_ticks from pgflow.schedules where schedule_name = 'sch_every_second'`;
    assert.equal(Number(schedule.skipped_ticks), 0);

    // Every run completes with its own tick's time.
    await waitFor(async () => {
      const [{ open }] = await sql`
        select count(*)::int as open from pgflow.runs
        where flow_slug = 'sch_e2e' and status <> 'completed'`;
      return open === 0;
    }, { timeoutMs: 30_000, what: "every scheduled run to complete" });
    const outputs = await sql<{ tick: string; output: unknown }[]>`
      select to_char(k.tick_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') as tick,
             r.output
      from pgflow.schedule_ticks k join pgflow.runs r using (run_id)`;
    for (const o of outputs) assert.deepEqual(o.output, { echo: o.tick });
  } finally {
    await stopAll(workers);
  }
});

db.test("every ticker stopped for 16 s: ticks over 10 s late are skipped, on-time ones fire", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const config = { connectionString: url, scheduleTickIntervalMs: 300 };
  try {
    await startWorker(workers, flow, config);
    await sql`select pgflow.create_schedule('sch_outage', 'sch_e2e', every => '1 second')`;
    await waitFor(async () => (await ticks(sql, "sch_outage")).length >= 2, {
      timeoutMs: 10_000,
      what: "two ticks before the outage",
    });
    await stopAll(workers);
    const before = (await ticks(sql, "sch_outage")).length;
    await sleep(16_000);
    await startWorker(workers, flow, config);
    await waitFor(async () => {
      const [s] = await sql`
        select skipped_ticks from pgflow.schedules where schedule_name = 'sch_outage'`;
      return Number(s.skipped_ticks) > 0;
    }, { timeoutMs: 10_000, what: "the first pass after the outage" });

    const fired = await ticks(sql, "sch_outage");
    const [{ skipped }] = await sql`
      select skipped_ticks::int as skipped from pgflow.schedules where schedule_name = 'sch_outage'`;
    // About 16 ticks fell in the outage: the ~10 less than 10 s late fired, the ~6 older skipped.
    assert.ok(skipped >= 3 && skipped <= 9, `${skipped} skipped`);
    const span = fired.at(-1)!.second - fired[0].second + 1;
    assert.equal(fired.length + skipped, span, "each tick fired or skipped, never both");
    assert.ok(fired.length - before >= 8, `${fired.length - before} fired after the outage`);
    assert.deepEqual(fired.filter((t) => t.late_ms >= 10_000), [], "no run for a missed tick");
  } finally {
    await stopAll(workers);
  }
});
