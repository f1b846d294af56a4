/**
 * Sending events from the typed client and the CLI (docs/waiting.md): `client.sendEvent` with a
 * flow checks the payload with the step's schema (nothing sent when it fails) and types it; by
 * name it reaches waits by key; a second event is reported ignored; `getRun` shows what a step
 * waits for, since and until when; `pgflow events send` prints each wait reached (never the
 * payload) with exit codes 0, 3 and 2; `pgflow runs show` shows the step as waiting.
 */
import assert from "node:assert/strict";
import { createClient, EventPayloadError, Flow, type StandardSchemaV1 } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { runCli, shown } from "../cli/helpers.ts";
import { createClient as createSupabase } from "@supabase/supabase-js";
import { fakePostgrest } from "./postgrest.ts";
import { readOnly } from "../../src/cli/dashboard/read_only.ts";
import { readRun } from "../../src/cli/dashboard/run_view.ts";

const db = testDatabase(import.meta.url);

/** A tiny Standard Schema: `{ approved: boolean }`. */
const Decision: StandardSchemaV1<unknown, { approved: boolean }> = {
  "~standard": {
    version: 1,
    vendor: "test",
    validate: (value: unknown) =>
      typeof (value as { approved?: unknown } | null)?.approved === "boolean"
        ? { value: value as { approved: boolean } }
        : { issues: [{ message: "approved must be a boolean", path: ["approved"] }] },
  },
};

const flow = new Flow<{ orderId: string }>({ slug: "cev_approval" })
  .waitForEvent({
    slug: "decision",
    event: "cev_decided",
    key: "$.orderId",
    payload: Decision,
    timeout: "1 day",
  })
  .step({ slug: "after", dependsOn: ["decision"] }, (deps) => deps.decision.approved);

db.test("client.sendEvent: typed, checked, by run or key, reported", async ({ sql }) => {
  await compileFlow(sql, flow);
  const client = createClient({ sql, transport: "poll" });
  try {
    const a = await client.startFlow(flow, { orderId: "C-1" });
    const b = await client.startFlow(flow, { orderId: "C-2" });
    const state = await client.getRun(a.runId);
    const decision = state?.steps.find((s) => s.stepSlug === "decision");
    assert.equal(decision?.wait?.kind, "event");
    assert.equal(decision?.wait?.event, "cev_decided");
    assert.equal(decision?.wait?.key, "C-1");
    assert.ok(decision?.wait?.since && decision.wait.until, "since and until are shown");

    await assert.rejects(
      // @ts-expect-error: the payload is typed as the step's output
      client.sendEvent(flow, "decision", { approved: "yes" }, { runId: a.runId }),
      (e: unknown) =>
        e instanceof EventPayloadError && /approved must be a boolean/.test(e.message),
    );
    assert.equal((await client.getRun(a.runId))?.steps[0].status, "started", "nothing was sent");

    const sent = await client.sendEvent(flow, "decision", { approved: true }, { runId: a.runId });
    assert.deepEqual(sent.results.map((r) => [r.runId, r.status]), [[a.runId, "delivered"]]);
    const again = await client.sendEvent(flow, "decision", { approved: false }, {
      runId: a.runId,
    });
    assert.deepEqual(again.results.map((r) => [r.status, r.reason]), [[
      "ignored",
      "step completed",
    ]]);
    const byKey = await client.sendEvent("cev_decided", { approved: false }, { key: "C-2" });
    assert.deepEqual(byKey.results.map((r) => [r.runId, r.status]), [[b.runId, "delivered"]]);
    await assert.rejects(
      client.sendEvent("cev_decided", null, { runId: a.runId, key: "x" } as never),
      /exactly one of \{ runId \} and \{ key \}/,
    );
    await assert.rejects(
      // @ts-expect-error: a step of the flow
      client.sendEvent(flow, "nope", null, { key: "x" }),
      /no step "nope"/,
    );
  } finally {
    await client.close();
  }
});

db.test("pgflow events send and runs show", async ({ sql, url }) => {
  await compileFlow(sql, flow);
  const [{ run_id: runId }] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow('cev_approval', '{"orderId": "S-1"}')`;
  const cli = (...args: string[]) => runCli([...args, "--database-url", url]);

  const show = await cli("runs", "show", runId);
  assert.equal(show.code, 0, shown(show));
  assert.match(
    show.stdout,
    /decision\s+single\s+waiting\s.*waiting for event cev_decided \(key S-1\) since .*, until /,
  );

  // The dashboard's run view: the step is waiting, for its event, with no task queued.
  const view = await readOnly(sql, (tx) => readRun(tx, runId));
  const waiting = view?.steps.find((s) => s.stepSlug === "decision");
  assert.equal(waiting?.status, "waiting");
  assert.deepEqual(waiting?.waits.map((w) => w.kind === "event" && [w.event, w.key]), [[
    "cev_decided",
    "S-1",
  ]]);

  const sent = await cli(
    "events",
    "send",
    "cev_decided",
    "--key",
    "S-1",
    "--payload",
    '{"approved": true, "secret": "p4ss"}',
  );
  assert.equal(sent.code, 0, shown(sent));
  assert.match(sent.stdout, new RegExp(`run ${runId} step decision: delivered`));
  assert.doesNotMatch(sent.stdout + sent.stderr, /p4ss/, "the payload is never printed");

  const twice = await cli("events", "send", "cev_decided", "--run", runId, "--json");
  assert.equal(twice.code, 3, shown(twice));
  assert.equal(JSON.parse(twice.stdout).results[0].reason, "step completed");

  const kept = await cli("events", "send", "cev_decided", "--key", "S-9");
  assert.equal(kept.code, 0, shown(kept));
  assert.match(kept.stdout, /key S-9: kept until /);

  const usage = await cli("events", "send", "cev_decided");
  assert.equal(usage.code, 2, shown(usage));
  assert.match(usage.stderr, /exactly one of --run RUN_ID and --key KEY/);
  const wrong = await cli("events", "send", "other_event", "--run", runId);
  assert.equal(wrong.code, 1, shown(wrong));
  assert.match(
    wrong.stderr,
    /has no event step waiting for event 'other_event'.*decision waits for cev_decided/,
  );
});

db.test("client.sendEvent over supabase-js rpc: the same answers", async ({ sql, url }) => {
  await compileFlow(sql, flow);
  const api = fakePostgrest(url);
  const supabase = createSupabase(api.url, "service-role-key", { auth: { persistSession: false } });
  const client = createClient({ supabase, transport: "poll", pollIntervalMs: 25 });
  try {
    const [{ run_id: runId }] = await sql<{ run_id: string }[]>`
      select run_id from pgflow.start_flow('cev_approval', '{"orderId": "R-1"}')`;
    const sent = await client.sendEvent(flow, "decision", { approved: true }, { key: "R-1" });
    assert.deepEqual(sent.results.map((r) => [r.runId, r.stepSlug, r.status]), [[
      runId,
      "decision",
      "delivered",
    ]]);
    const kept = await client.sendEvent("cev_decided", { approved: true }, {
      key: "R-2",
      keepSeconds: 60,
    });
    assert.equal(kept.results[0].status, "kept");
    assert.ok(api.calls.some((c) => c.startsWith("send_event(")), api.calls.join("; "));
    const [{ output }] = await sql`select output from pgflow.step_states
                                   where run_id = ${runId} and step_slug = 'decision'`;
    assert.deepEqual(output, { approved: true });
  } finally {
    await client.close();
    await api.close();
  }
});
