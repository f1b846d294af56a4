/**
 * `client.schedules` over postgres.js: create (input typed from the flow), update, pause, resume,
 * list and delete, each one call of the SQL function; the database's refusals as `ScheduleError`
 * with SQLSTATE and hint; and a tick fired afterwards starting the run with the client's input.
 */
import assert from "node:assert/strict";
import { createClient as createSupabase } from "@supabase/supabase-js";
import { createClient, exactNumber, Flow, parseJson, ScheduleError } from "../../mod.ts";
import { jsonText } from "../../src/util/json_write.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { fakePostgrest } from "./postgrest.ts";

const db = testDatabase(import.meta.url);

const report = new Flow<{ full: boolean; big: number }>({ slug: "cls_report" })
  .step({ slug: "build" }, (input) => input.full);

db.test("client.schedules: create, update, pause, resume, list, delete", async ({ sql, url }) => {
  await compileFlow(sql, report);
  const client = createClient({ connectionString: url });
  try {
    const created = await client.schedules.create(report, {
      name: "cls_nightly",
      cron: "0 2 * * *",
      timeZone: "Europe/Paris",
      // Beyond 2^53: stored exactly, as startFlow's input.
      input: { full: true, big: exactNumber(9007199254740993n) as unknown as number },
      tickKey: "at",
    });
    assert.deepEqual(
      [created.name, created.flow, created.cron, created.timeZone, created.paused],
      ["cls_nightly", "cls_report", "0 2 * * *", "Europe/Paris", false],
    );
    assert.ok(created.nextTickAt !== null);
    const updated = await client.schedules.update("cls_nightly", {
      every: "1 second",
      catchUp: 3,
      tickKey: null,
    });
    assert.deepEqual([updated.cron, updated.everySeconds, updated.catchUp, updated.tickKey], [
      null,
      1,
      3,
      null,
    ]);
    assert.equal((await client.schedules.pause("cls_nightly")).paused, true);
    assert.equal((await client.schedules.resume("cls_nightly")).paused, false);
    const [listed] = await client.schedules.list();
    assert.equal(listed.name, "cls_nightly");

    const [{ n }] = await sql`
      select pgflow.fire_due_schedules(next_tick_at + interval '0.5 seconds') as n
      from pgflow.schedules`;
    assert.equal(n, 1);
    const [run] =
      await sql`select input::text as input from pgflow.runs where flow_slug = 'cls_report'`;
    assert.equal(run.input, '{"big": 9007199254740993, "full": true}');
    assert.ok((await client.schedules.list())[0].lastRunId !== null);

    assert.equal(await client.schedules.delete("cls_nightly"), true);
    assert.equal(await client.schedules.delete("cls_nightly"), false);
    assert.deepEqual(await client.schedules.list(), []);
  } finally {
    await client.close();
  }
});

db.test("client.schedules: the database's refusal is a ScheduleError with its hint", async ({ sql, url }) => {
  await compileFlow(sql, report);
  const client = createClient({ connectionString: url });
  try {
    await assert.rejects(
      client.schedules.create(report, {
        name: "cls_bad",
        cron: "0 9 * * *",
        timeZone: "Mars/Olympus",
        input: { full: false, big: 1 },
      }),
      (e: unknown) => {
        assert.ok(e instanceof ScheduleError);
        assert.equal(e.code, "22023");
        assert.match(
          e.message,
          /^time zone 'Mars\/Olympus' is not known to this database \(use an IANA name/,
        );
        return true;
      },
    );
    await assert.rejects(
      client.schedules.pause("cls_none"),
      (e: unknown) => e instanceof ScheduleError && e.code === "P0002",
    );
    await assert.rejects(
      client.schedules.create("cls_report", { name: "cls_x", every: "often", input: {} }),
      (e: unknown) => e instanceof ScheduleError && /often/.test(e.message),
    );
  } finally {
    await client.close();
  }
});

db.test("client.schedules over supabase-js: the input comes back exactly (big numbers are not rounded)", async ({ sql, url }) => {
  await compileFlow(sql, report);
  const api = fakePostgrest(url);
  const supabase = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
  const client = createClient({ supabase, transport: "poll", pollIntervalMs: 25 });
  try {
    const input = parseJson(
      '{"full": true, "big": 12345678901234567890123, "tiny": 0.1000000000000000055511151231257827}',
    );
    const created = await client.schedules.create("cls_report", {
      name: "cls_exact",
      every: "1 hour",
      input,
    });
    const [stored] = await sql<{ t: string }[]>`
      select input::text as t from pgflow.schedules where schedule_name = 'cls_exact'`;
    assert.match(stored.t, /12345678901234567890123/);
    assert.equal(jsonText(created.input), jsonText(parseJson(stored.t)));
    const [listed] = await client.schedules.list();
    assert.equal(jsonText(listed.input), jsonText(parseJson(stored.t)));
    assert.ok(api.calls.some((c) => c.startsWith("list_schedules")));
  } finally {
    await client.close();
    await api.close();
  }
});
