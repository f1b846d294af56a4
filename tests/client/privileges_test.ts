/**
 * The grant model for the client, with the Supabase roles: service_role may start runs and read
 * them whole (a client connected as service_role does everything it needs), anon and
 * authenticated nothing; the wrappers of docs/permissions.md, run as written, let a signed-in user
 * start one flow and read only their own runs. `auth.uid()` reads `request.jwt.claims` as on
 * Supabase.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createClient, type FlowWorker } from "../../mod.ts";
import { codeBlocks } from "../docs/markdown.ts";
import { testDatabase } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { greet } from "./fixtures.ts";

const db = testDatabase(import.meta.url);

const permissions = Deno.readTextFileSync(new URL("../../docs/permissions.md", import.meta.url));

/** The Supabase roles and auth.uid(), defined the way Supabase defines them. */
async function supabasePlatform(sql: postgres.Sql): Promise<void> {
  await sql.unsafe(`
    do $$ begin
      if not exists (select 1 from pg_roles where rolname = 'anon') then create role anon nologin; end if;
      if not exists (select 1 from pg_roles where rolname = 'authenticated') then create role authenticated nologin; end if;
    end $$;
    create schema if not exists auth;
    create or replace function auth.uid() returns uuid language sql stable as $$
      select coalesce(
        nullif(current_setting('request.jwt.claim.sub', true), ''),
        (nullif(current_setting('request.jwt.claims', true), '')::jsonb ->> 'sub')
      )::uuid
    $$;
    grant usage on schema auth to anon, authenticated, service_role;
    grant usage on schema public to anon, authenticated, service_role;`);
}

/** A connection acting as `role`, with the JWT claims PostgREST would set for `sub`. */
async function as(connect: () => postgres.Sql, role: string, sub?: string): Promise<postgres.Sql> {
  const conn = connect();
  await conn.unsafe(`set role ${role}`);
  if (sub !== undefined) {
    await conn`select set_config('request.jwt.claims', ${JSON.stringify({ sub, role })}, false)`;
  }
  return conn;
}

db.test("service_role starts and reads runs; a client connected as service_role needs no more", async ({ sql, url }) => {
  await supabasePlatform(sql);
  const service = postgres(url, {
    max: 2,
    onnotice: () => {},
    connection: { options: "-c role=service_role" },
  });
  const client = createClient({ sql: service });
  const workers: FlowWorker[] = [];
  try {
    const [{ current_user }] = await service`select current_user`;
    assert.equal(current_user, "service_role");
    await startWorker(workers, greet, { connectionString: url });
    assert.equal(await client.transport(), "listen");
    const run = await client.startFlow(greet, { name: "svc" }, { runId: crypto.randomUUID() });
    const again = await client.startFlow(greet, { name: "svc" }, { runId: run.runId });
    assert.equal(again.runId, run.runId);
    assert.deepEqual(await run.waitFor("completed", { timeoutMs: 60_000 }), {
      hello: { text: "hello svc" },
    });
    assert.equal((await client.getRun(run.runId))?.steps[0].status, "completed");
    await assert.rejects(
      service`update pgflow.runs set status = 'failed' where run_id = ${run.runId}`,
      /permission denied/,
    );
  } finally {
    await stopAll(workers);
    await client.close();
    await service.end({ timeout: 1 });
  }
});

db.test("anon and authenticated can neither start runs nor read them, through pgflow or the client", async ({ sql, connect }) => {
  await supabasePlatform(sql);
  await sql`select pgflow.create_flow('closed_flow')`;
  const [{ run_id }] = await sql`select run_id from pgflow.start_flow('closed_flow', '{}')`;
  for (const role of ["anon", "authenticated"]) {
    const conn = await as(connect, role, crypto.randomUUID());
    for (
      const call of [
        "select pgflow.start_flow('closed_flow', '{}')",
        `select pgflow.get_run('${run_id}')`,
        "select * from pgflow.runs",
        "select * from pgflow.step_states",
      ]
    ) {
      await assert.rejects(conn.unsafe(call), /permission denied/, `${role}: ${call}`);
    }
    const client = createClient({ sql: conn, transport: "poll" });
    await assert.rejects(
      client.startFlow("closed_flow", {}),
      /permission denied/,
    );
    await assert.rejects(client.getRun(run_id), /permission denied/);
    await client.close();
  }
});

db.test("docs/permissions.md: authenticated starts its one flow and reads only its own runs", async ({ sql, connect }) => {
  await supabasePlatform(sql);
  await sql`select pgflow.create_flow('thread_triage_v1')`;
  await sql`select pgflow.add_step('thread_triage_v1', 'classify')`;
  await sql`select pgflow.create_flow('other_flow')`;
  const blocks = codeBlocks(permissions).filter((b) =>
    b.lang === "sql" && b.attrs.includes("own-runs")
  );
  assert.equal(blocks.length, 1, "docs/permissions.md has one sql own-runs block");
  await sql.unsafe(blocks[0].code);

  const alice = crypto.randomUUID();
  const bob = crypto.randomUUID();
  const asAlice = await as(connect, "authenticated", alice);
  const asBob = await as(connect, "authenticated", bob);
  const [{ run }] = await asAlice`select public.start_triage('t1', 'site is down') as run`;
  const [{ bobs }] = await asBob`select public.start_triage('t2', 'hello') as bobs`;

  // Alice reads her run whole, as get_run returns it; Bob's run is not hers: null.
  const [{ doc }] = await asAlice`select public.my_triage_run(${run}) as doc`;
  assert.equal(doc.run_id, run);
  assert.equal(doc.flow_slug, "thread_triage_v1");
  assert.deepEqual(doc.input, { threadId: "t1", text: "site is down" });
  assert.deepEqual(doc.steps.map((s: { step_slug: string }) => s.step_slug), ["classify"]);
  const [{ other }] = await asAlice`select public.my_triage_run(${bobs}) as other`;
  assert.equal(other, null);
  // Row level security: each sees only their own rows.
  assert.deepEqual((await asAlice`select run_id from public.my_triage_runs`).map((r) => r.run_id), [
    run,
  ]);
  assert.deepEqual((await asBob`select run_id from public.my_triage_runs`).map((r) => r.run_id), [
    bobs,
  ]);
  // The wrapper fixes the flow; pgflow itself stays closed.
  for (
    const call of [
      "select pgflow.start_flow('other_flow', '{}')",
      `select pgflow.get_run('${bobs}')`,
      "select * from pgflow.runs",
    ]
  ) {
    await assert.rejects(asAlice.unsafe(call), /permission denied/, call);
  }
  // Not signed in: refused by the wrapper; anon: not even callable.
  const anonymous = await as(connect, "authenticated");
  await assert.rejects(anonymous`select public.start_triage('t3', 'x')`, /sign in first/);
  const anon = await as(connect, "anon", alice);
  await assert.rejects(anon`select public.start_triage('t3', 'x')`, /permission denied/);
  await assert.rejects(anon`select public.my_triage_run(${run})`, /permission denied/);
  // The wrappers pin search_path.
  const pinned = await sql`
    select p.proname, p.proconfig from pg_proc p
    where p.pronamespace = 'public'::regnamespace and p.proname in ('start_triage', 'my_triage_run')
    order by 1`;
  assert.deepEqual(pinned.map((p) => [p.proname, p.proconfig]), [
    ["my_triage_run", ['search_path=""']],
    ["start_triage", ['search_path=""']],
  ]);
});

db.test("docs/permissions.md: authenticated cancels and retries only its own runs", async ({ sql, connect }) => {
  await supabasePlatform(sql);
  await sql`select pgflow.create_flow('thread_triage_v1')`;
  await sql`select pgflow.add_step('thread_triage_v1', 'classify')`;
  // The own-runs block may be there already (the test above, on this file's database).
  const [{ made }] = await sql`select to_regclass('public.my_triage_runs') is not null as made`;
  for (const tag of made ? ["own-actions"] : ["own-runs", "own-actions"]) {
    const blocks = codeBlocks(permissions).filter((b) => b.lang === "sql" && b.attrs.includes(tag));
    assert.equal(blocks.length, 1, `docs/permissions.md has one sql ${tag} block`);
    await sql.unsafe(blocks[0].code);
  }
  const alice = crypto.randomUUID();
  const bob = crypto.randomUUID();
  const asAlice = await as(connect, "authenticated", alice);
  const asBob = await as(connect, "authenticated", bob);
  const [{ run }] = await asAlice`select public.start_triage('t1', 'site is down') as run`;
  // Bob cannot cancel Alice's run: refused as an unknown one would be.
  await assert.rejects(asBob`select public.cancel_my_triage_run(${run})`, /no such run of yours/);
  assert.equal(
    (await sql`select status from pgflow.runs where run_id = ${run}`)[0].status,
    "started",
  );
  const [{ cancelled }] =
    await asAlice`select public.cancel_my_triage_run(${run}, 'oops') as cancelled`;
  assert.equal(cancelled, true);
  const [{ again }] = await asAlice`select public.retry_my_triage_run(${run}) as again`;
  const [{ doc }] = await asAlice`select public.my_triage_run(${again}) as doc`;
  assert.deepEqual([doc.status, doc.restart_of_run_id, doc.restart_mode], [
    "started",
    run,
    "retry",
  ]);
  await assert.rejects(asBob`select public.retry_my_triage_run(${run})`, /no such run of yours/);
  // pgflow itself stays closed to them; anon cannot even call the wrappers.
  for (
    const call of [`select pgflow.cancel_run('${again}')`, `select pgflow.retry_run('${run}')`]
  ) {
    await assert.rejects(asAlice.unsafe(call), /permission denied/, call);
  }
  const anon = await as(connect, "anon", alice);
  await assert.rejects(anon`select public.cancel_my_triage_run(${again})`, /permission denied/);
});

db.test("docs/permissions.md: authenticated completes only the approval of its own runs", async ({ sql, connect }) => {
  await supabasePlatform(sql);
  await sql`select pgflow.create_flow('order_approval_v1')`;
  await sql`select pgflow.add_step('order_approval_v1', 'decision')`;
  await sql`select pgflow._set_wait('order_approval_v1', 'decision',
                                    '{"kind": "event", "event": "order_decided"}')`;
  const blocks = codeBlocks(permissions).filter((b) =>
    b.lang === "sql" && b.attrs.includes("own-approvals")
  );
  assert.equal(blocks.length, 1, "docs/permissions.md has one sql own-approvals block");
  await sql.unsafe(blocks[0].code);
  const alice = crypto.randomUUID();
  const bob = crypto.randomUUID();
  const [{ run_id: run }] = await sql`
    select run_id from pgflow.start_flow('order_approval_v1', ${sql.json({ userId: alice })})`;
  const asAlice = await as(connect, "authenticated", alice);
  const asBob = await as(connect, "authenticated", bob);
  await assert.rejects(asBob`select public.decide_my_order(${run}, true)`, /no such run of yours/);
  const [{ status }] = await asAlice`select public.decide_my_order(${run}, true) as status`;
  assert.equal(status, "delivered");
  const [{ again }] = await asAlice`select public.decide_my_order(${run}, false) as again`;
  assert.equal(again, "ignored");
  const [{ output }] = await sql`select output from pgflow.step_states
                                 where run_id = ${run} and step_slug = 'decision'`;
  assert.deepEqual(output, { approved: true, by: alice });
  await assert.rejects(
    asAlice`select pgflow.send_event('order_decided', '{}', run_id => ${run})`,
    /permission denied/,
  );
  const anonymous = await as(connect, "authenticated");
  await assert.rejects(anonymous`select public.decide_my_order(${run}, true)`, /sign in first/);
  const anon = await as(connect, "anon", alice);
  await assert.rejects(anon`select public.decide_my_order(${run}, true)`, /permission denied/);
});
