/**
 * Tasks waiting for capacity (flow control) as the client sees them: `getRun` lists a step's
 * waiting tasks per key with why they wait, and `waitingTasks` lists them per queue and key, over
 * postgres.js as the owner and as service_role, and over supabase-js rpc.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { createClient as createSupabase } from "@supabase/supabase-js";
import { createClient, type PgflowClient } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { limitedFlow } from "../support/flow_control.ts";
import { fakePostgrest } from "./postgrest.ts";
import { utcMicros } from "../../src/client/supabase_backend.ts";

const db = testDatabase(import.meta.url);

const UTC_MICROS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;

/** Three runs on channel C042 (one in flight, two waiting) and one on C777 (in flight). */
async function threeWaitOnOne(client: PgflowClient, flow: string): Promise<string[]> {
  const ids: string[] = [];
  for (const channel of ["C042", "C042", "C777", "C042"]) {
    ids.push((await client.startFlow(flow, { channel })).runId);
  }
  return ids;
}

async function checkViews(client: PgflowClient, flow: string, ids: string[]): Promise<void> {
  const queue = `${flow}_q`;
  const first = await client.getRun(ids[0]);
  assert.equal(first?.steps[0].status, "started");
  assert.deepEqual(first?.steps[0].waiting, [], "a released task is not waiting");
  const second = await client.getRun(ids[1]);
  assert.equal(second?.steps[0].status, "started");
  const [w, ...more] = second?.steps[0].waiting ?? [];
  assert.equal(more.length, 0);
  assert.match(w?.since ?? "", UTC_MICROS);
  assert.deepEqual({ ...w, since: "" }, {
    limitScope: `${flow}/s`,
    limitKey: "C042",
    tasks: 1,
    since: "",
    inFlight: 1,
    maxRunning: 1,
    reason: `concurrency ${flow}/s key C042: 1 of 1 in flight`,
  });
  assert.deepEqual((await client.getRun(ids[2]))?.steps[0].waiting, []);

  const all = (await client.waitingTasks()).filter((x) => x.queueName === queue);
  assert.equal(all.length, 1);
  assert.match(all[0].since, UTC_MICROS);
  assert.deepEqual({ ...all[0], since: "" }, {
    queueName: queue,
    limitScope: `${flow}/s`,
    limitKey: "C042",
    tasks: 2,
    since: "",
    inFlight: 1,
    maxRunning: 1,
    reason: `concurrency ${flow}/s key C042: 1 of 1 in flight`,
  });
  assert.ok(all[0].since <= w.since, "the oldest of the queue's waiting tasks");
  assert.deepEqual(await client.waitingTasks(queue), all);
  assert.deepEqual(await client.waitingTasks("other_q"), []);
}

db.test("getRun shows a waiting task's key and reason; waitingTasks lists them per queue and key; service_role may read both", async ({ sql, url }) => {
  await limitedFlow(sql, "cl_wait", "cl_wait_q", 1);
  const owner = createClient({ connectionString: url, transport: "poll" });
  const service = postgres(url, {
    max: 1,
    onnotice: () => {},
    connection: { options: "-c role=service_role" },
  });
  const asService = createClient({ sql: service, transport: "poll" });
  try {
    const ids = await threeWaitOnOne(owner, "cl_wait");
    await checkViews(owner, "cl_wait", ids);
    await checkViews(asService, "cl_wait", ids);
    await assert.rejects(
      owner.waitingTasks(""),
      (e: unknown) => e instanceof TypeError && /"" is not a queue name/.test(e.message),
    );
  } finally {
    await owner.close();
    await asService.close();
    await service.end();
  }
});

db.test("over supabase-js rpc: the same waiting tasks, the same reasons", async ({ sql, url }) => {
  await limitedFlow(sql, "cl_wait_rpc", "cl_wait_rpc_q", 1);
  const api = fakePostgrest(url);
  const supabase = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
  const client = createClient({ supabase, transport: "poll", pollIntervalMs: 25 });
  try {
    const ids = await threeWaitOnOne(client, "cl_wait_rpc");
    await checkViews(client, "cl_wait_rpc", ids);
    assert.ok(api.calls.includes("waiting_tasks(queue_name)"), api.calls.join("; "));
    // A cancel by service_role frees the run's unit at commit: the next waiting task is sent.
    assert.equal((await client.run(ids[0]).cancel()).cancelled, true);
    const [next] = (await client.getRun(ids[1]))?.steps ?? [];
    assert.deepEqual(next.waiting, []);
    const [task] = await sql`select status from pgflow.step_tasks where run_id = ${ids[1]}::uuid`;
    assert.equal(task.status, "queued");
    assert.equal((await client.waitingTasks("cl_wait_rpc_q"))[0].tasks, 1);
  } finally {
    await client.close();
    await api.close();
  }
});

Deno.test("a time PostgREST sends comes out with six fractional digits in UTC, as the SQL backend's", () => {
  // Postgres's JSON text drops a fraction's trailing zeros (one in ten times a microsecond ends
  // in 0), and the whole fraction on a whole second.
  assert.equal(utcMicros("2026-12-06T19:33:39.86752+00:00"), "2026-12-06T19:33:39.867520Z");
  assert.equal(utcMicros("2026-12-06T19:33:39+00:00"), "2026-12-06T19:33:39.000000Z");
  assert.equal(utcMicros("2026-12-06T19:33:39.123456Z"), "2026-12-06T19:33:39.123456Z");
  // Another offset, to UTC, keeping the microseconds.
  assert.equal(utcMicros("2026-12-06T21:03:39.000001+01:30"), "2026-12-06T19:33:39.000001Z");
  assert.equal(utcMicros("2026-12-06 14:33:39.5-05"), "2026-12-06T19:33:39.500000Z");
  assert.throws(
    () => utcMicros("yesterday"),
    /not a timestamp as PostgREST sends one: "yesterday"/,
  );
});
