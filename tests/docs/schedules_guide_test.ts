/**
 * docs/schedules.md does what it shows: its SQL examples run against a real database (the
 * schedules they create exist with the timing they say, and a tick fired afterwards starts a run
 * with the tick's time under "at"), its next-times query answers, and the errors it quotes are
 * the database's own, message and hint.
 */
import assert from "node:assert/strict";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";
import { blockNamed, codeBlocks } from "./markdown.ts";

const db = testDatabase(import.meta.url);
const guide = Deno.readTextFileSync(`${REPO_ROOT}docs/schedules.md`);
const blocks = codeBlocks(guide);

db.test("schedules guide: its SQL creates what it says, and a tick starts its run", async ({ sql }) => {
  await defineFlow(sql, "report", [{ slug: "build" }]);
  await sql.unsafe(blockNamed(blocks, "sql", "create-schedules").code);
  const rows = await sql`
    select schedule_name, cron, time_zone, extract(epoch from every)::int as every, tick_key
    from pgflow.schedules order by schedule_name`;
  assert.deepEqual(rows.map((r) => [r.schedule_name, r.cron, r.time_zone, r.every, r.tick_key]), [
    ["nightly_report", "0 2 * * *", "Europe/Paris", null, null],
    ["poll_inbox", null, "UTC", 10, "at"],
  ]);
  const [{ n }] = await sql`
    select pgflow.fire_due_schedules(next_tick_at + interval '1 second') as n
    from pgflow.schedules where schedule_name = 'poll_inbox'`;
  assert.equal(n, 1);
  const [run] = await sql`select input from pgflow.runs`;
  assert.equal(run.input.full, false);
  assert.match(run.input.at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d0\.000000Z$/);

  const times = await sql.unsafe(blockNamed(blocks, "sql", "next-times").code);
  assert.equal(times.length, 3);
});

db.test("schedules guide: the errors it quotes are the database's", async ({ sql }) => {
  await defineFlow(sql, "report_errors", [{ slug: "build" }]);
  const quoted = /```\n(ERROR:[\s\S]*?)```/.exec(guide)![1];
  const attempts = [
    sql`select pgflow.create_schedule('e1', 'report_errors', cron => '0 25 * * *')`,
    sql`select pgflow.create_schedule('e2', 'report_errors', cron => '0 9 * * *', time_zone => 'Paris')`,
    sql`select pgflow.create_schedule('e3', 'report_errors', cron => '0 0 30 2 *')`,
  ];
  for (const attempt of attempts) {
    await assert.rejects(attempt, (e: { message: string; hint?: string }) => {
      assert.ok(quoted.includes(`ERROR:  ${e.message}\n`), `${e.message} is not quoted as is`);
      if (e.hint && quoted.includes(`ERROR:  ${e.message}\nHINT:`)) {
        assert.ok(quoted.includes(`HINT:  ${e.hint}\n`), `${e.hint} is not quoted as is`);
      }
      return true;
    });
  }
});
