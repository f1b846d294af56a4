/**
 * The client over supabase-js. Two stand-ins, since the tests run no Supabase stack:
 *
 * - the real supabase-js client against a small HTTP server that answers `rpc` the way PostgREST
 *   does (`fakePostgrest`, postgrest.ts): the client's rpc names, arguments and error handling meet
 *   the SQL functions;
 * - Realtime: `realtime.send` defined in the database as Supabase's inserts a message, here handed
 *   to listeners with pg_notify, and a client whose `channel()` delivers those broadcasts to the
 *   channels of their topic: the triggers' broadcasts wake the client's Realtime transport.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { createClient as createSupabase } from "@supabase/supabase-js";
import {
  ClientClosedError,
  createClient,
  type FlowWorker,
  RunActionError,
  RunCancelledError,
  RunFailedError,
  RunNotFoundError,
  StartFlowError,
  type SupabaseClient,
} from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { failing, greet, words } from "./fixtures.ts";
import { fakePostgrest } from "./postgrest.ts";

const db = testDatabase(import.meta.url);

db.test("supabase-js rpc: start (idempotent), wait, read, and errors, as service_role", async ({ url }) => {
  const api = fakePostgrest(url);
  const supabase = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
  const client = createClient({ supabase, transport: "poll", pollIntervalMs: 25 });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, greet, { connectionString: url });
    await startWorker(workers, failing, { connectionString: url });
    assert.equal(await client.transport(), "poll");
    const runId = crypto.randomUUID();
    const run = await client.startFlow(greet, { name: "edge" }, { runId });
    const again = await client.startFlow(greet, { name: "edge" }, { runId });
    assert.equal(again.runId, runId);
    assert.deepEqual(await run.waitFor("completed", { timeoutMs: 60_000 }), {
      hello: { text: "hello edge" },
    });
    const state = await client.getRun(runId);
    assert.deepEqual(state?.steps.map((s) => [s.stepSlug, s.status]), [["hello", "completed"]]);
    assert.equal(await client.getRun(crypto.randomUUID()), null);
    await assert.rejects(
      client.startFlow("cl_nope", {}),
      (e: unknown) =>
        e instanceof StartFlowError && e.code === "22023" && /cl_nope/.test(e.message),
    );
    // Many runs in one rpc: the handles in input order, each run its input's.
    const many = await client.startFlows(greet, [{ name: "a" }, { name: "b" }], { priority: 3 });
    assert.deepEqual(
      await Promise.all(many.map((r) => r.waitFor("completed", { timeoutMs: 60_000 }))),
      [{ hello: { text: "hello a" } }, { hello: { text: "hello b" } }],
    );
    await assert.rejects(
      client.startFlows("cl_nope", [{}]),
      (e: unknown) =>
        e instanceof StartFlowError && e.code === "22023" && /cl_nope/.test(e.message),
    );
    const bad = await client.startFlow(failing, { id: 2 });
    await assert.rejects(bad.waitFor("completed", { timeoutMs: 60_000 }), RunFailedError);
    assert.ok(api.calls.includes("start_flow(flow_slug, input, run_id)"));
    assert.ok(api.calls.includes("get_run_text(run_id)"));
    assert.ok(api.calls.includes("start_flows(flow_slug, inputs, priority)"));
  } finally {
    await stopAll(workers);
    await client.close();
    await api.close();
  }
});

db.test("supabase-js rpc: cancel, retry, resume and listRuns go through rpc, with the same answers and errors", async ({ url, sql }) => {
  const api = fakePostgrest(url);
  const supabase = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
  const client = createClient({ supabase, transport: "poll", pollIntervalMs: 25 });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, failing, { connectionString: url });
    await sql`select pgflow.create_flow('cl_rpc_idle')`;
    await sql`select pgflow.add_step('cl_rpc_idle', 'a')`;
    const idle = await client.startFlow("cl_rpc_idle", { n: 1 });
    assert.deepEqual(await idle.cancel("by rpc"), {
      runId: idle.runId,
      flowSlug: "cl_rpc_idle",
      status: "cancelled",
      cancelled: true,
    });
    assert.deepEqual(await idle.cancel(), {
      runId: idle.runId,
      flowSlug: "cl_rpc_idle",
      status: "cancelled",
      cancelled: false,
    });
    await assert.rejects(
      idle.waitFor("completed", { timeoutMs: 60_000 }),
      (e: unknown) => e instanceof RunCancelledError && e.reason === "by rpc",
    );
    const state = await idle.state();
    assert.equal(state.cancelReason, "by rpc");
    assert.deepEqual(state.steps.map((s) => s.status), ["cancelled"]);

    const retried = await idle.retry();
    assert.equal(retried.flowSlug, "cl_rpc_idle");
    assert.equal((await retried.state()).restartOfRunId, idle.runId);
    await assert.rejects(
      retried.resume(),
      (e: unknown) => e instanceof RunActionError && e.code === "55000" && e.status === "started",
    );
    await assert.rejects(client.run(crypto.randomUUID()).cancel(), RunNotFoundError);
    await assert.rejects(client.run(crypto.randomUUID()).retry(), RunNotFoundError);

    const bad = await client.startFlow(failing, { id: 3 });
    const error = await bad.waitFor("completed", { timeoutMs: 60_000 }).catch((e) => e);
    assert.ok(error instanceof RunFailedError, String(error));
    assert.match(error.attempts[0]?.errorMessage ?? "", /the disk is on fire/);
    const resumed = await bad.resume();
    await assert.rejects(resumed.waitFor("completed", { timeoutMs: 60_000 }), RunFailedError);
    assert.deepEqual(
      (await resumed.state()).steps.map((s) => [s.stepSlug, s.reused]),
      [["check", true], ["explode", false], ["never", false]],
    );

    const listed = await client.listRuns({ flow: "cl_rpc_idle", since: new Date(0), limit: 10 });
    assert.deepEqual(listed.map((r) => [r.runId, r.status, r.restartOfRunId]), [
      [retried.runId, "started", idle.runId],
      [idle.runId, "cancelled", null],
    ]);
    assert.deepEqual(
      (await client.listRuns({ runIdPrefix: idle.runId.slice(0, 8) })).map((r) => r.runId),
      [idle.runId],
    );
    await retried.cancel();
    for (
      const call of [
        "cancel_run(reason, run_id)",
        "retry_run(again, run_id)",
        "resume_run(again, run_id)",
        "list_runs(flow_slug, max_rows, restarted, run_id_prefix, since, status)",
      ]
    ) {
      assert.ok(api.calls.includes(call), `${call} in ${api.calls.join("; ")}`);
    }
  } finally {
    await stopAll(workers);
    await client.close();
    await api.close();
  }
});

/** Broadcasts `realtime.send` makes, delivered to the channels of their topic. */
async function fakeRealtime(sql: postgres.Sql, connect: () => postgres.Sql) {
  await sql.unsafe(`
    create schema realtime;
    create function realtime.send(payload jsonb, event text, topic text, private boolean default true)
    returns void language sql as $$
      select pg_notify('fake_realtime', jsonb_build_object(
        'payload', payload, 'event', event, 'topic', topic, 'private', private)::text)
    $$;`);
  type Handler = (message: unknown) => void;
  const channels = new Map<string, { event: string; handler: Handler; private: boolean }[]>();
  const joined: string[] = [];
  const listener = connect();
  await listener.listen("fake_realtime", (text) => {
    const m = JSON.parse(text);
    for (const c of channels.get(m.topic) ?? []) {
      if (c.event === m.event && c.private === m.private) {
        c.handler({ type: "broadcast", event: m.event, payload: m.payload });
      }
    }
  });
  const supabase = {
    schema: () => ({ rpc: () => Promise.reject(new Error("not used")) }),
    channel(topic: string, options: { config: { private: boolean } }) {
      const subs: { event: string; handler: Handler; private: boolean }[] = [];
      const channel = {
        topic,
        on(_type: string, filter: { event: string }, handler: Handler) {
          subs.push({ event: filter.event, handler, private: options.config.private });
          return channel;
        },
        subscribe(callback: (status: string) => void) {
          channels.set(topic, [...(channels.get(topic) ?? []), ...subs]);
          joined.push(topic);
          setTimeout(() => callback("SUBSCRIBED"), 5);
          return channel;
        },
      };
      return channel;
    },
    removeChannel(channel: { topic: string }) {
      channels.delete(channel.topic);
      return Promise.resolve("ok");
    },
  };
  return { supabase, joined, channels };
}

db.test("Realtime: the triggers' broadcasts on the run's private topic wake the client", async ({ sql, url, connect }) => {
  const realtime = await fakeRealtime(sql, connect);
  // Reads go straight to the database; wake-ups come only from the broadcasts (the safety
  // re-read is a minute away, so a run that finishes quickly was heard, not polled).
  const service = connect({ max: 2 });
  const rpcOnSql = {
    ...realtime.supabase,
    schema: () => ({
      rpc: async (fn: string, args: Record<string, unknown>) => {
        try {
          const [row] = fn === "get_run_text"
            ? await service`select pgflow.get_run_text(${args.run_id as string}::uuid) as result`
            : await service`select to_jsonb(pgflow.start_flow(${args.flow_slug as string}, ${
              JSON.stringify(args.input)
            }::text::jsonb, ${args.run_id as string | null}::uuid)) as result`;
          return { data: row.result, error: null };
        } catch (e) {
          return { data: null, error: e };
        }
      },
    }),
  };
  const client = createClient({
    supabase: rpcOnSql as unknown as SupabaseClient,
    safetyIntervalMs: 60_000,
  });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, words, { connectionString: url, queueName: "cl_work" });
    assert.equal(await client.transport(), "realtime");
    const run = await client.startFlow(words, { text: "one two" });
    const started = Date.now();
    const types: string[] = [];
    for await (const e of run.events()) types.push(e.type);
    assert.ok(Date.now() - started < 30_000);
    assert.deepEqual(types, [
      "run:started",
      "step:started",
      "step:completed",
      "step:started",
      "step:completed",
      "step:started",
      "step:completed",
      "run:completed",
    ]);
    assert.deepEqual(realtime.joined, [`pgflow_run:${run.runId}`]);
    assert.equal(realtime.channels.size, 0, "the channel was removed at the end");
  } finally {
    await stopAll(workers);
    await client.close();
  }
});

db.test(
  "close() rejects a pending waitFor and ends events, over rpc polling and Realtime",
  async ({ sql, url, connect }) => {
    // A flow no worker serves: its runs stay started.
    await sql`select pgflow.create_flow('cl_idle')`;
    await sql`select pgflow.add_step('cl_idle', 'a')`;
    const api = fakePostgrest(url);
    const realtime = await fakeRealtime(sql, connect);
    const rpc = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
    const both = { ...realtime.supabase, schema: (name: string) => rpc.schema(name) };
    try {
      for (const transport of ["poll", "realtime"] as const) {
        const client = createClient({
          supabase: both as unknown as SupabaseClient,
          transport,
          pollIntervalMs: 25,
        });
        assert.equal(await client.transport(), transport);
        const run = await client.startFlow("cl_idle", {});
        const wait = run.waitFor("completed", { timeoutMs: 120_000 }).then(
          () => assert.fail("an idle run cannot complete"),
          (e: unknown) => e,
        );
        const seen: string[] = [];
        const iteration = (async () => {
          for await (const e of run.events()) seen.push(e.type);
          return "ended";
        })();
        await waitFor(() => seen.length >= 2, { what: `${transport}: the run's first events` });
        await new Promise((r) => setTimeout(r, 300));
        await client.close();
        let timer: ReturnType<typeof setTimeout> | undefined;
        // Far beyond what close() takes on a busy machine: only a promise left pending gets here.
        const late = new Promise((r) => timer = setTimeout(() => r("still pending"), 30_000));
        const error = await Promise.race([wait, late]);
        assert.ok(
          error instanceof ClientClosedError && error.reason === "closed" &&
            error.runId === run.runId,
          `${transport}: ${error}`,
        );
        assert.equal(await Promise.race([iteration, late]), "ended", transport);
        clearTimeout(timer);
        assert.deepEqual(seen, ["run:started", "step:started"]);
        if (transport === "realtime") {
          assert.equal(realtime.channels.size, 0, "the channels were removed");
        }
      }
    } finally {
      await api.close();
    }
  },
  { fresh: true },
);
