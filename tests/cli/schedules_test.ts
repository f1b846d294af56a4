/**
 * `pgflow schedules list|create|pause|resume|delete` against a real database: create with cron
 * and a time zone or with an interval, the list (text and JSON), pause and resume, delete, and
 * the database's refusals (a bad cron expression, time zone or flow) with its hint, usage errors
 * and unknown names with their exit codes.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const schedules = (url: string, ...args: string[]) =>
  runCli(["schedules", ...args, "--database-url", url]);

db.test("schedules create, list, pause, resume, delete", async ({ sql, url }) => {
  const none = await schedules(url, "list");
  assert.equal(none.code, 3, shown(none));
  assert.match(none.stdout, /no schedules/);
  await defineFlow(sql, "cs_report", [{ slug: "a" }]);

  const made = await schedules(
    url,
    "create",
    "cs_nightly",
    "cs_report",
    "--cron",
    "0 2 * * *",
    "--time-zone",
    "Europe/Paris",
    "--input",
    '{"full": true}',
    "--tick-key",
    "at",
  );
  assert.equal(made.code, 0, shown(made));
  assert.match(
    made.stdout,
    /^cs_nightly: cs_report, 0 2 \* \* \* \(Europe\/Paris\); next tick \d{4}-/,
  );
  const fast = await schedules(
    url,
    "create",
    "cs_fast",
    "cs_report",
    "--every",
    "10 seconds",
    "--json",
  );
  assert.equal(fast.code, 0, shown(fast));
  assert.equal(JSON.parse(fast.stdout).every_seconds, 10);

  const listed = await schedules(url, "list");
  assert.equal(listed.code, 0, shown(listed));
  assert.match(listed.stdout, /^schedule\s+flow\s+timing\s+next tick\s+last tick/m);
  assert.match(listed.stdout, /^cs_fast\s+cs_report\s+every 10 s\s+\d{4}-/m);
  const json = JSON.parse((await schedules(url, "list", "--json")).stdout);
  assert.deepEqual(json.schedules.map((s: { schedule: string }) => s.schedule), [
    "cs_fast",
    "cs_nightly",
  ]);
  assert.deepEqual(json.schedules[1].input, { full: true });

  const paused = await schedules(url, "pause", "cs_fast");
  assert.equal(paused.code, 0, shown(paused));
  assert.equal(paused.stdout.trim(), "cs_fast: paused");
  assert.match(
    (await schedules(url, "list")).stdout,
    /^cs_fast\s+cs_report\s+every 10 s\s+paused/m,
  );
  const resumed = await schedules(url, "resume", "cs_fast");
  assert.match(resumed.stdout, /^cs_fast: next tick \d{4}-/);

  const deleted = await schedules(url, "delete", "cs_fast");
  assert.equal(deleted.code, 0, shown(deleted));
  const gone = await schedules(url, "delete", "cs_fast");
  assert.equal(gone.code, 3, shown(gone));
  assert.match(gone.stderr, /there is no schedule cs_fast; `.*schedules list` lists them/);
  assert.equal((await schedules(url, "pause", "cs_fast")).code, 3);
});

db.test("schedules create: the database's refusal with its hint, and usage errors", async ({ sql, url }) => {
  await defineFlow(sql, "cs_bad", [{ slug: "a" }]);
  const badCron = await schedules(url, "create", "cs_x", "cs_bad", "--cron", "0 25 * * *");
  assert.equal(badCron.code, 1, shown(badCron));
  assert.match(
    badCron.stderr,
    /cron expression '0 25 \* \* \*': hour field value '25' is out of range; the hour field takes 0 to 23/,
  );
  const badZone = await schedules(
    url,
    "create",
    "cs_x",
    "cs_bad",
    "--cron",
    "0 9 * * *",
    "--time-zone",
    "Paris",
  );
  assert.equal(badZone.code, 1, shown(badZone));
  assert.match(badZone.stderr, /time zone 'Paris' is not known to this database; use an IANA name/);
  const noFlow = await schedules(url, "create", "cs_x", "cs_nope", "--every", "1 minute");
  assert.equal(noFlow.code, 1, shown(noFlow));
  assert.match(noFlow.stderr, /flow or alias 'cs_nope' does not exist/);
  const badEvery = await schedules(url, "create", "cs_x", "cs_bad", "--every", "often");
  assert.equal(badEvery.code, 1, shown(badEvery));
  assert.match(badEvery.stderr, /--every often is not an interval/);

  const both = await schedules(url, "create", "cs_x", "cs_bad");
  assert.equal(both.code, 2, shown(both));
  assert.match(both.stderr, /needs --cron EXPR .* or --every INTERVAL/);
  const badInput = await schedules(
    url,
    "create",
    "cs_x",
    "cs_bad",
    "--every",
    "1 minute",
    "--input",
    "{",
  );
  assert.equal(badInput.code, 2, shown(badInput));
  assert.match(badInput.stderr, /--input is not JSON/);
  const noName = await schedules(url, "pause");
  assert.equal(noName.code, 2, shown(noName));
  const [{ n }] =
    await sql`select count(*)::int as n from pgflow.schedules where schedule_name = 'cs_x'`;
  assert.equal(n, 0, "nothing was created");
});
