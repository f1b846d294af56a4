/**
 * The dashboard's Schedules panel: the overview answer lists every schedule with its timing (cron
 * with its time zone, or the interval), paused or its next tick, the run its last tick started or
 * why none started, and the ticks skipped; never a schedule's input.
 */
import assert from "node:assert/strict";
import { createPool } from "../../src/platform/pool.ts";
import { startDashboard } from "../../src/cli/dashboard/server.ts";
import type { Overview } from "../../src/cli/dashboard/queries.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("the overview lists schedules: timing, next and last tick, last run or error, skipped", async ({ sql, url }) => {
  await defineFlow(sql, "ds_report", [{ slug: "a" }]);
  await defineFlow(sql, "ds_gone", [{ slug: "a" }]);
  await sql`select pgflow.create_schedule('ds_nightly', 'ds_report', cron => '0 2 * * *',
                                          time_zone => 'Europe/Paris', input => '{"secret": "s3"}')`;
  await sql`select pgflow.create_schedule('ds_often', 'ds_report', every => '10 seconds')`;
  await sql`select pgflow.create_schedule('ds_broken', 'ds_gone', every => '1 minute')`;
  await sql`select pgflow.pause_schedule('ds_nightly')`;
  await sql`select pgflow.delete_flow_and_data('ds_gone')`;
  // An outage of a minute for ds_often (six ticks due: one fires, five skipped) and one tick of
  // ds_broken, whose flow is gone.
  await sql`select pgflow.fire_due_schedules(max(next_tick_at) + interval '60 seconds')
            from pgflow.schedules`;
  const [{ run }] = await sql`select last_run_id::text as run from pgflow.schedules
                             where schedule_name = 'ds_often'`;

  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const res = await fetch(new URL("api/overview", dashboard.url));
    assert.equal(res.status, 200);
    const text = await res.text();
    assert.ok(!text.includes("s3"), "a schedule's input is not shown");
    const o: Overview = JSON.parse(text);
    const byName = Object.fromEntries(o.schedules.map((s) => [s.name, s]));
    assert.deepEqual(Object.keys(byName), ["ds_broken", "ds_nightly", "ds_often"]);
    assert.deepEqual(
      [byName.ds_nightly.timing, byName.ds_nightly.paused, byName.ds_nightly.nextTickAt],
      ["0 2 * * * (Europe/Paris)", true, null],
    );
    assert.equal(byName.ds_often.timing, "every 10 s");
    assert.equal(byName.ds_often.lastRunId, run);
    assert.ok(byName.ds_often.skippedTicks >= 4, String(byName.ds_often.skippedTicks));
    assert.match(byName.ds_broken.lastError ?? "", /flow 'ds_gone' does not exist/);
    const page = await (await fetch(dashboard.url)).text();
    assert.match(page, /<section id="schedules" class="wide"><h2>Schedules<\/h2>/);
  } finally {
    await dashboard.shutdown();
    await pool.end();
  }
});
