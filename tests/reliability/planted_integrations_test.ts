/**
 * Optional integrations are called only when they are the real ones. The engine calls
 * `realtime.send` (run-event triggers, inside the security definer `start_flow`), `net.http_post`
 * with `vault.decrypted_secrets` (`ensure_workers`, run as the owner or by pg_cron) and
 * `cron.schedule` (`schedule_maintenance`) with its owner's rights. A role allowed only to create
 * schemas plants each of them on a database that lacks the integration, with a body that records
 * the call and makes the planter superuser; nothing planted may ever run.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

/**
 * A login-less role with CREATE on this database and nothing else; `plant` runs SQL as it. Roles
 * are shared by the whole test server, so each test gets its own name.
 */
async function planter(sql: postgres.Sql) {
  const role = `pgflow_planter_${crypto.randomUUID().slice(0, 8)}`;
  const [{ database }] = await sql`select current_database() as database`;
  await sql.unsafe(`create role ${role} nologin; grant create on database ${database} to ${role}`);
  return {
    role,
    plant: (statements: string) =>
      sql.begin(async (tx) => {
        await tx.unsafe(`set local role ${role}`);
        await tx.unsafe(statements);
      }),
    isSuperuser: async () =>
      (await sql`select rolsuper from pg_roles where rolname = ${role}`)[0].rolsuper as boolean,
    drop: async () => {
      await sql.unsafe(`drop owned by ${role} cascade; drop role ${role}`);
    },
  };
}

/** plpgsql statements that record their call and try to make `role` superuser. */
const payload = (schema: string, role: string) => `
    insert into ${schema}.calls values (current_user);
    execute format('alter role %I superuser', '${role}');`;

db.test("a planted realtime.send is never called, by start_flow as service_role or by completions", async ({ sql }) => {
  await defineFlow(sql, "plant_rt", [
    { slug: "a", queue: "plant_rt_q" },
    { slug: "b", deps: ["a"], queue: "plant_rt_q" },
  ], { mode: "routed" });
  const p = await planter(sql);
  try {
    await p.plant(`
      create schema realtime;
      create table realtime.calls (who text);
      grant insert on realtime.calls to public;
      create function realtime.send(payload jsonb, event text, topic text, private boolean default true)
      returns void language plpgsql as $$ begin ${payload("realtime", p.role)} end $$;
      grant usage on schema realtime to public;`);

    // As Supabase's backend would: service_role starts the run (start_flow is security definer).
    const runId = crypto.randomUUID();
    await sql.begin(async (tx) => {
      await tx.unsafe(`set local role service_role`);
      await tx`select pgflow.start_flow('plant_rt', '{}', ${runId}::uuid)`;
    });
    // The owner's worker completes a and starts b: status changes fire the trigger again.
    const worker = await registerWorker(sql, "plant_rt_q");
    const [task] = await readAndStart(sql, "plant_rt_q", worker, [["plant_rt", "a"]], 10);
    await sql`select pgflow.complete_task(${runId}::uuid, 'a', 0, '1', ${task.attempt})`;

    assert.equal(await p.isSuperuser(), false, "the planter did not become superuser");
    assert.deepEqual(
      [...await sql`select who from realtime.calls`],
      [],
      "the planted function never ran",
    );
    const [run] =
      await sql`select status from pgflow.step_states where run_id = ${runId}::uuid and step_slug = 'b'`;
    assert.equal(run.status, "started", "the run went on as if Realtime were absent");
  } finally {
    await p.drop();
  }
});

db.test("a realtime.send owned by a superuser (the platform's) is still called", async ({ sql }) => {
  await defineFlow(sql, "plant_rt_ok", [{ slug: "a", queue: "plant_rt_ok_q" }], { mode: "routed" });
  // This connection is a superuser, as Supabase's own roles that create realtime.send are.
  await sql.unsafe(`
    create schema realtime;
    create table realtime.sent (topic text);
    create function realtime.send(payload jsonb, event text, topic text, private boolean default true)
    returns void language sql as $$ insert into realtime.sent values (topic) $$;`);
  try {
    const runId = crypto.randomUUID();
    await sql`select pgflow.start_flow('plant_rt_ok', '{}', ${runId}::uuid)`;
    assert.deepEqual([...await sql`select topic from realtime.sent`], [{
      topic: `pgflow_run:${runId}`,
    }]);
  } finally {
    await sql.unsafe(`drop schema realtime cascade`);
  }
});

db.test("a planted net.http_post and vault.decrypted_secrets are never used by ensure_workers", async ({ sql }) => {
  const p = await planter(sql);
  try {
    await p.plant(`
      create schema net;
      create table net.calls (who text);
      grant insert on net.calls to public;
      create function net.http_post(url text, headers jsonb default '{}', body jsonb default '{}')
      returns bigint language plpgsql as $$ begin ${payload("net", p.role)} return 1; end $$;
      create schema vault;
      create view vault.decrypted_secrets as
        select * from (values ('supabase_project_url', 'http://127.0.0.1:9'),
                              ('supabase_service_role_key', 'key')) v(name, decrypted_secret);
      grant usage on schema net, vault to public;
      grant select on vault.decrypted_secrets to public;`);
    const worker = crypto.randomUUID();
    await sql`select pgflow.register_worker(${worker}, 'plant_ka_q', 'fn_plant_ka', '[]'::jsonb)`;
    await sql`select pgflow.mark_worker_stopped(${worker})`;
    const picked = (await sql`select * from pgflow.ensure_workers()`)
      .filter((r) => r.function_name === "fn_plant_ka");
    assert.deepEqual(
      picked.map((r) => `${r.function_name} pinged=${r.pinged}`),
      ["fn_plant_ka pinged=false"],
      "picked, but not pinged through a planted pg_net",
    );
    assert.equal(await p.isSuperuser(), false, "the planter did not become superuser");
    assert.deepEqual(
      [...await sql`select who from net.calls`],
      [],
      "the planted function never ran",
    );
  } finally {
    await p.drop();
  }
});

db.test("a planted cron.schedule is never called by schedule_maintenance", async ({ sql }) => {
  const p = await planter(sql);
  try {
    await p.plant(`
      create schema cron;
      create table cron.calls (who text);
      grant insert on cron.calls to public;
      create function cron.schedule(name text, schedule text, command text)
      returns bigint language plpgsql as $$ begin ${payload("cron", p.role)} return 1; end $$;
      grant usage on schema cron to public;`);
    await assert.rejects(
      () => sql`select pgflow.schedule_maintenance()`,
      /cron\.schedule\(text, text, text\) is not a member of the pg_cron extension; it was not called/,
    );
    assert.equal(await p.isSuperuser(), false, "the planter did not become superuser");
    assert.deepEqual(
      [...await sql`select who from cron.calls`],
      [],
      "the planted function never ran",
    );
  } finally {
    await p.drop();
  }
});
