/**
 * An upgrade as users run it: a database on the 0.1.0 baseline, with runs started and tasks
 * claimed, is migrated by `pgflow migrate` (the real migrator, from a copy of the published
 * module) to a later release, and the work in flight then finishes. A later migration that fails
 * (an error in it, a lock wait past its lock_timeout) is rolled back whole, with the work intact.
 * The later release is a fixture written as the tooling writes migrations: it adds a column with a
 * default to a runtime table and a function, and bumps the engine version.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { addLaterMigrations, engineFiles, publishedCopy, runCli, shown } from "../cli/helpers.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });
const BASELINE = engineFiles()[0].slice(0, -4);

const LATER =
  `-- A release after 0.1.0: a runtime table gains a column with a default, a new function,
-- and the engine version it sets.
alter table pgflow.step_states add column upgrade_note text not null default 'none';

create function pgflow.upgrade_probe()
returns integer
language sql
immutable
set search_path = ''
as $$ select 1 $$;

create or replace function pgflow.engine_version()
returns text
language sql
immutable
set search_path = ''
as $$
  select '0.1.1'::text
$$;`;

/** A copy of the module at release 0.1.1: the baseline, then `body`. Returns its CLI entry. */
async function release(copies: string[], body: string): Promise<string> {
  const copy = await publishedCopy();
  copies.push(copy);
  await addLaterMigrations(copy, [body]);
  const version = `${copy}/src/util/version.ts`;
  await Deno.writeTextFile(
    version,
    (await Deno.readTextFile(version)).replace(
      'ENGINE_VERSION = "0.1.0"',
      'ENGINE_VERSION = "0.1.1"',
    ),
  );
  return `${copy}/src/cli/main.ts`;
}

/** `pgflow migrate` on `url` from the module whose CLI entry is `entry` (default: this one). */
async function migrate(url: string, entry?: string) {
  return await runCli(["migrate", "--database-url", url], { entry });
}

/** What an upgrade must not touch: tasks, step states (but a new column), queued messages. */
async function workInFlight(sql: postgres.Sql, queues: string[]): Promise<string> {
  const tasks = await sql`select * from pgflow.step_tasks order by run_id, step_slug, task_index`;
  const states = await sql`select run_id, step_slug, status, remaining_tasks
                           from pgflow.step_states order by run_id, step_slug`;
  const runs = await sql`select run_id, status, remaining_steps from pgflow.runs order by run_id`;
  const messages = [];
  for (const q of queues) {
    messages.push((await queueMessages(sql, q)).map(({ vt_in_seconds: _, ...m }) => m));
  }
  return JSON.stringify({ tasks, states, runs, messages });
}

/** Claims and completes every task of `flow` until its runs are all completed. */
async function finishRuns(
  sql: postgres.Sql,
  flow: string,
  queues: Record<string, string[]>,
): Promise<void> {
  const workers = new Map<string, string>();
  for (const queue of Object.keys(queues)) workers.set(queue, await registerWorker(sql, queue));
  await waitFor(async () => {
    for (const [queue, steps] of Object.entries(queues)) {
      const worker = workers.get(queue)!;
      const pairs = steps.map((s): [string, string] => [flow, s]);
      for (const t of await readAndStart(sql, queue, worker, pairs)) {
        if (t.disposition !== "claimed") continue;
        await sql`select pgflow.complete_task(${t.run_id}, ${t.step_slug}, ${t.task_index},
                                              '1', ${t.attempt})`;
      }
    }
    const [{ open }] = await sql`select count(*)::int as open from pgflow.runs
                                 where flow_slug = ${flow} and status <> 'completed'`;
    return open === 0;
  }, { what: `every run of ${flow} completed` });
}

db.test(
  "an upgrade from the baseline keeps work in flight, which then finishes",
  async ({ sql, url }) => {
    const copies: string[] = [];
    try {
      const base = await migrate(url);
      assert.equal(base.code, 0, shown(base));

      // Work in flight on the baseline: a routed flow on two queues, started runs, claimed tasks.
      await defineFlow(sql, "triage_v1", [
        { slug: "classify", queue: "thread_processing" },
        { slug: "enrich", deps: ["classify"], queue: "thread_processing" },
        { slug: "deliver", deps: ["enrich"], queue: "slack_delivery" },
      ], { mode: "routed" });
      for (let i = 0; i < 4; i++) {
        await sql`select pgflow.start_flow('triage_v1', ${sql.json({ i })})`;
      }
      const worker = await registerWorker(sql, "thread_processing");
      const claimed =
        (await readAndStart(sql, "thread_processing", worker, [["triage_v1", "classify"]], 2))
          .filter((r) => r.disposition === "claimed");
      assert.equal(claimed.length, 2);
      const queues = ["thread_processing", "slack_delivery"];
      const before = await workInFlight(sql, queues);

      const upgraded = await migrate(url, await release(copies, LATER));
      assert.equal(upgraded.code, 0, shown(upgraded));
      assert.match(upgraded.stderr, /applying 1 migration\(s\).* \(1 already applied\)/);
      assert.match(upgraded.stderr, /migrated on .* to engine 0\.1\.1/);

      assert.equal(await workInFlight(sql, queues), before, "the work in flight is untouched");
      const [after] = await sql`
        select pgflow.engine_version() as version, pgflow.upgrade_probe() as probe,
               (select array_agg(distinct upgrade_note) from pgflow.step_states) as notes,
               (select array_agg(name order by name) from pgflow.migrations) as recorded`;
      assert.deepEqual(after, {
        version: "0.1.1",
        probe: 1,
        notes: ["none"],
        recorded: [BASELINE, "29990101000000_pgflow_later_0"],
      });

      // The claimed tasks complete after the upgrade, and every run finishes.
      for (const t of claimed) {
        await sql`select pgflow.complete_task(${t.run_id}, 'classify', 0, '1', ${t.attempt})`;
      }
      await finishRuns(sql, "triage_v1", {
        thread_processing: ["classify", "enrich"],
        slack_delivery: ["deliver"],
      });
    } finally {
      for (const c of copies) await Deno.remove(c, { recursive: true });
    }
  },
  { fresh: true },
);

db.test(
  "a later migration that fails is rolled back whole, and the work in flight is intact",
  async ({ sql, url, connect }) => {
    const copies: string[] = [];
    try {
      assert.equal((await migrate(url)).code, 0);
      await defineFlow(sql, "kept", [{ slug: "a", queue: "kept_q" }, {
        slug: "b",
        deps: ["a"],
        queue: "kept_q",
      }], { mode: "routed" });
      await sql`select pgflow.start_flow('kept', '{}')`;
      await sql`select pgflow.start_flow('kept', '{}')`;
      const worker = await registerWorker(sql, "kept_q");
      const [claimed] = await readAndStart(sql, "kept_q", worker, [["kept", "a"]], 1);
      assert.equal(claimed.disposition, "claimed");
      const catalog = async () =>
        JSON.stringify(
          await sql`select proname, md5(prosrc) as src from pg_proc
                    where pronamespace = 'pgflow'::regnamespace order by 1, 2`,
        ) + JSON.stringify(
          await sql`select attname from pg_attribute
                    where attrelid = 'pgflow.step_states'::regclass and attnum > 0 order by 1`,
        );
      const before = await workInFlight(sql, ["kept_q"]);
      const catalogBefore = await catalog();
      const unchanged = async (what: string) => {
        assert.equal(await workInFlight(sql, ["kept_q"]), before, `${what}: work untouched`);
        assert.equal(await catalog(), catalogBefore, `${what}: nothing of the migration stays`);
        const [state] = await sql`
          select pgflow.engine_version() as version,
                 (select array_agg(name) from pgflow.migrations) as recorded`;
        assert.deepEqual(state, { version: "0.1.0", recorded: [BASELINE] }, what);
      };

      // An error after the migration's changes: all of them are taken back.
      const broken = await migrate(
        url,
        await release(
          copies,
          `${LATER}\ndo $$ begin raise exception 'injected failure'; end $$;`,
        ),
      );
      assert.equal(broken.code, 1, shown(broken));
      assert.match(
        broken.stderr,
        /migration 29990101000000_pgflow_later_0\.sql failed and was rolled back, so it changed nothing: injected failure/,
      );
      await unchanged("an error");

      // A worker's transaction holds step_states: the migration's lock wait gives up after 5 s.
      const entry = await release(copies, LATER);
      const holder = connect();
      let letGo!: () => void;
      const held = holder.begin(async (tx) => {
        await tx`lock table pgflow.step_states in row exclusive mode`;
        await new Promise<void>((resolve) => letGo = resolve);
      });
      try {
        await waitFor(async () =>
          (await sql`select count(*)::int as n from pg_locks
                     where relation = 'pgflow.step_states'::regclass and mode = 'RowExclusiveLock'
                       and granted`)[0].n === 1, { what: "the holder's lock" });
        const timedOut = await migrate(url, entry);
        assert.equal(timedOut.code, 1, shown(timedOut));
        assert.match(
          timedOut.stderr,
          /pgflow_later_0\.sql failed and was rolled back, so it changed nothing: canceling statement due to lock timeout/,
        );
      } finally {
        letGo();
        await held;
      }
      await unchanged("a lock timeout");

      // Once the lock is gone the same release applies, and the work finishes.
      const applied = await migrate(url, entry);
      assert.equal(applied.code, 0, shown(applied));
      assert.equal((await sql`select pgflow.engine_version() as v`)[0].v, "0.1.1");
      await sql`select pgflow.complete_task(${claimed.run_id}, 'a', 0, '1', ${claimed.attempt})`;
      await finishRuns(sql, "kept", { kept_q: ["a", "b"] });
    } finally {
      for (const c of copies) await Deno.remove(c, { recursive: true });
    }
  },
  { fresh: true },
);
