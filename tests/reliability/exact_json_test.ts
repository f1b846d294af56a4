/**
 * What a run carries arrives exactly (as jsonb compares): random JSON documents (seeded, printed;
 * replay with RELIABILITY_SEED) with escaped keys of every kind, shapes repeated so that V8's
 * JSON.parse key-cache bug would strike, deep nesting, unicode, integers beyond 2^53 and decimals
 * with more digits than a double keeps, -0 and exponents, go through real workers whose handlers
 * return what they receive (the root step's input, a dependency's output, the run input loaded by
 * another worker). Started from SQL and through both client backends (postgres.js, supabase-js
 * over PostgREST): the stored outputs, and what each client reads (`waitFor`, `events`, `getRun`),
 * equal the input. The same documents also travel as an event's payload (`send_event` from SQL,
 * each client's `sendEvent`) to a `.waitForEvent()` step, and as a child run's input and output
 * (`.subflow()`, and `.subflowMap()` with an input mapping), back to the parent run's output.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { createClient as createSupabase } from "@supabase/supabase-js";
import {
  createClient,
  eventPayload,
  Flow,
  type FlowWorker,
  parseJson,
  type PgflowClient,
  routeFlow,
  StartFlowError,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { fakePostgrest } from "../client/postgrest.ts";
import { startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { seedFromEnv } from "./harness.ts";
import { randomJsonDocuments } from "./random_json.ts";
import type { Json } from "../../dsl.ts";

const db = testDatabase(import.meta.url);
const SEED = seedFromEnv();
console.log(`exact-json seed ${SEED} (replay with RELIABILITY_SEED=${SEED})`);

/**
 * `echo` returns the run input, `again` what `echo` returned, `whole` the run input read through
 * `context.flowInput`. `echo` runs on one queue and the others on another, so the second worker
 * loads the run input from the database (its cache never saw the root task).
 */
const echo = routeFlow(
  new Flow<unknown>({ slug: "xj_echo", maxAttempts: 1 })
    .step({ slug: "echo" }, (input) => input as never)
    .step({ slug: "again", dependsOn: ["echo"] }, (deps) => deps.echo as never)
    .step(
      { slug: "whole", dependsOn: ["echo"] },
      async (_deps, context) => (await context.flowInput) as never,
    ),
  { queues: { echo: "xj_first", again: "xj_second", whole: "xj_second" } },
);

/** The child flow: returns what it receives, so its output is `{"echo": <its input>}`. */
const child = new Flow<unknown>({ slug: "xj_child", maxAttempts: 1 })
  .step({ slug: "echo" }, (input) => input as never);

/**
 * The parent: `event` waits for a payload (its output, typed by a schema so the client checks
 * it), `child` runs the child on the run input, `children` runs it on each element of `pair`
 * (the run input twice) through an input mapping. Both flows on one queue, one worker.
 */
const parent = new Flow<unknown>({ slug: "xj_parent", maxAttempts: 1 })
  .waitForEvent({ slug: "event", event: "xj_document", payload: eventPayload<Json>() })
  .subflow({ slug: "child", flow: child })
  .array({ slug: "pair" }, (input) => [input, input] as never[])
  .subflowMap({ slug: "children", array: "pair", flow: child, input: (item) => ({ inner: item }) });

const NESTED_QUEUE = "xj_nested";
const nestedFlows = [
  routeFlow(child, { queues: { echo: NESTED_QUEUE } }),
  routeFlow(parent, {
    queues: {
      event: NESTED_QUEUE,
      child: NESTED_QUEUE,
      pair: NESTED_QUEUE,
      children: NESTED_QUEUE,
    },
  }),
];

/** The parent's run output for a document: the event's payload and what the children returned. */
function nestedOutput(text: string): string {
  const inner = `{"echo": {"inner": ${text}}}`;
  return `{"event": ${text}, "child": {"echo": ${text}}, "children": [${inner}, ${inner}]}`;
}

/**
 * The runs whose outputs differ from their input (as jsonb compares): the run output (the leaf
 * steps `again` and `whole`) and `echo`'s stored output.
 */
async function mismatches(sql: postgres.Sql, runs: readonly string[]): Promise<string[]> {
  const rows = await sql<{ run_id: string; status: string; same: boolean }[]>`
    select r.run_id::text, r.status,
           r.output = jsonb_build_object('again', r.input, 'whole', r.input)
             and s.output = r.input as same
    from pgflow.runs r
    join pgflow.step_states s on s.run_id = r.run_id and s.step_slug = 'echo'
    where r.run_id = any(${runs as string[]}::uuid[])`;
  return rows.filter((r) => r.status !== "completed" || !r.same)
    .map((r) => `${r.run_id} ${r.status}`);
}

/** A parent run, the document it carries, and how a failure names it. */
interface NestedRun {
  readonly runId: string;
  readonly text: string;
  readonly label: string;
}

/**
 * The parent runs whose output differs from {@link nestedOutput}, and the child runs whose input or
 * output differs from what the parent gave and got, each named with its document.
 */
async function nestedMismatches(
  sql: postgres.Sql,
  runs: readonly NestedRun[],
): Promise<string[]> {
  const rows = await sql<{ what: string }[]>`
    with t(run_id, doc, label) as (
      select * from unnest(${runs.map((r) => r.runId)}::uuid[], ${runs.map((r) => r.text)}::text[],
                           ${runs.map((r) => r.label)}::text[])
    )
    select t.label || ' parent ' || r.status as what from t join pgflow.runs r using (run_id)
    where r.status <> 'completed' or r.output is distinct from jsonb_build_object(
      'event', t.doc::jsonb, 'child', jsonb_build_object('echo', t.doc::jsonb),
      'children', jsonb_build_array(jsonb_build_object('echo', jsonb_build_object('inner', t.doc::jsonb)),
                                    jsonb_build_object('echo', jsonb_build_object('inner', t.doc::jsonb))))
    union all
    select t.label || ' child ' || c.parent_step_slug || '[' || c.parent_task_index || '] ' || c.status
    from t join pgflow.runs c on c.parent_run_id = t.run_id
    where c.status <> 'completed'
       or c.input is distinct from case when c.parent_step_slug = 'child' then t.doc::jsonb
                                        else jsonb_build_object('inner', t.doc::jsonb) end
       or c.output is distinct from jsonb_build_object('echo', c.input)`;
  return rows.map((r) => r.what);
}

/** One value a client read, and the document it should equal. */
interface Reading {
  readonly what: string;
  readonly value: unknown;
  readonly want: string;
}

/** The readings that differ from their document (as jsonb compares). */
async function differing(sql: postgres.Sql, readings: readonly Reading[]): Promise<string[]> {
  const rows = await sql<{ what: string }[]>`
    select what from unnest(${readings.map((r) => r.what)}::text[],
                            ${readings.map((r) => JSON.stringify(r.value) ?? null)}::text[],
                            ${readings.map((r) => r.want)}::text[]) as t(what, got, want)
    where got::jsonb is distinct from want::jsonb`;
  return rows.map((r) => r.what);
}

/** What `client` reads of a completed run of `text`: getRun's input and outputs. */
async function readBack(client: PgflowClient, runId: string, text: string, label: string) {
  const state = await client.getRun(runId);
  const readings: Reading[] = [
    { what: `${label} getRun input`, value: state?.input, want: text },
    { what: `${label} getRun output`, value: state?.output, want: pair(text) },
  ];
  for (const step of state?.steps ?? []) {
    readings.push({ what: `${label} getRun ${step.stepSlug}`, value: step.output, want: text });
  }
  return readings;
}

/** The run output of a document: its leaf steps' outputs. */
function pair(text: string): string {
  return `{"again": ${text}, "whole": ${text}}`;
}

/** Both client backends on the test database; `close` ends them and the PostgREST stand-in. */
function clients(url: string) {
  const api = fakePostgrest(url);
  // No token refresh: supabase-js would run a timer for it (Deno 2.5's test sanitizer fails on it).
  const supabase = createSupabase(api.url, "service-role-key", {
    auth: { persistSession: false, autoRefreshToken: false },
  });
  const list: [string, PgflowClient][] = [
    ["postgres.js", createClient({ connectionString: url })],
    ["supabase-js", createClient({ supabase, transport: "poll", pollIntervalMs: 20 })],
  ];
  return {
    list,
    close: async () => {
      for (const [, client] of list) await client.close();
      await api.close();
    },
  };
}

/**
 * A worker per `[flows, queue]` and both clients, for `body`; then stops them. `echo`'s two
 * workers (one per queue), or the nested flows' one.
 */
async function withWorkers(
  url: string,
  queues: readonly (readonly [flows: unknown, queue: string])[],
  body: (clients: [string, PgflowClient][]) => Promise<void>,
): Promise<void> {
  const workers: FlowWorker[] = [];
  const both = clients(url);
  try {
    for (const [flows, queueName] of queues) {
      await startWorker(workers, flows as never, { connectionString: url, queueName });
    }
    await body(both.list);
  } finally {
    await stopAll(workers);
    await both.close();
  }
}

const ECHO_WORKERS = [[echo, "xj_first"], [echo, "xj_second"]] as const;

db.test("random JSON started from SQL comes back exactly through real workers and both clients", async ({ sql, url }) => {
  await withWorkers(url, ECHO_WORKERS, async (list) => {
    const documents = randomJsonDocuments({ count: 120, seed: SEED });
    const runs: string[] = [];
    const readings: Reading[] = [];
    // One after another: the bug needs an earlier document of the same shape parsed first.
    for (const [i, text] of documents.entries()) {
      const [row] = await sql<{ run_id: string }[]>`
        select run_id::text from pgflow.start_flow('xj_echo', ${text}::text::jsonb)`;
      runs.push(row.run_id);
      await waitForRun(sql, row.run_id, 20_000);
      for (const [name, client] of list) {
        readings.push(...await readBack(client, row.run_id, text, `document ${i} ${name}`));
      }
    }
    const bad = await mismatches(sql, runs);
    assert.deepEqual(
      bad.map((b) => `${b}: ${documents[runs.indexOf(b.split(" ")[0])]}`),
      [],
      `seed ${SEED}`,
    );
    assert.deepEqual(await differing(sql, readings), [], `seed ${SEED}`);
  });
});

db.test("random JSON started by each client comes back exactly in waitFor, events and getRun", async ({ sql, url }) => {
  await withWorkers(url, ECHO_WORKERS, async (list) => {
    const documents = randomJsonDocuments({ count: 50, seed: SEED + 1 });
    const readings: Reading[] = [];
    for (const [name, client] of list) {
      for (const [i, text] of documents.entries()) {
        const label = `document ${i} ${name}`;
        // The client is given values as parseJson reads them (numbers beyond a double as
        // ExactNumbers), and writes them back with JSON.stringify.
        const run = await client.startFlow("xj_echo", parseJson(text));
        const events = [];
        for await (const event of run.events()) events.push(event);
        readings.push({
          what: `${label} waitFor`,
          value: await run.waitFor("completed", { timeoutMs: 20_000 }),
          want: pair(text),
        });
        for (const event of events) {
          if (event.type === "run:started") {
            readings.push({ what: `${label} run:started`, value: event.input, want: text });
          } else if (event.type === "step:completed") {
            readings.push({ what: `${label} ${event.stepSlug}`, value: event.output, want: text });
          } else if (event.type === "run:completed") {
            readings.push({
              what: `${label} run:completed`,
              value: event.output,
              want: pair(text),
            });
          }
        }
        assert.equal(events.filter((e) => e.type === "step:completed").length, 3, label);
        readings.push(...await readBack(client, run.runId, text, label));
        const [stored] = await sql<{ input: string }[]>`
          select input::text from pgflow.runs where run_id = ${run.runId}::uuid`;
        readings.push({
          what: `${label} stored input`,
          value: parseJson(stored.input),
          want: text,
        });
      }
    }
    assert.deepEqual(await differing(sql, readings), [], `seed ${SEED}`);
  });
});

db.test("random JSON comes back exactly as an event's payload and through child runs (SQL)", async ({ sql, url }) => {
  await withWorkers(url, [[nestedFlows, NESTED_QUEUE]], async (list) => {
    const documents = randomJsonDocuments({ count: 60, seed: SEED + 2 });
    const runs: NestedRun[] = [];
    const readings: Reading[] = [];
    for (const [i, text] of documents.entries()) {
      const [row] = await sql<{ run_id: string }[]>`
        select run_id::text from pgflow.start_flow('xj_parent', ${text}::text::jsonb)`;
      await sql`select pgflow.send_event('xj_document', ${text}::text::jsonb, run_id => ${row.run_id}::uuid)`;
      runs.push({ runId: row.run_id, text, label: `document ${i}` });
    }
    for (const [i, { runId, text }] of runs.entries()) {
      await waitForRun(sql, runId, 30_000);
      for (const [name, client] of list) {
        const state = await client.getRun(runId);
        readings.push({
          what: `document ${i} ${name} getRun output`,
          value: state?.output,
          want: nestedOutput(text),
        });
      }
    }
    assert.deepEqual(await nestedMismatches(sql, runs), [], `seed ${SEED}`);
    assert.deepEqual(await differing(sql, readings), [], `seed ${SEED}`);
  });
});

db.test("random JSON sent by each client's sendEvent comes back exactly in the parent's output", async ({ sql, url }) => {
  await withWorkers(url, [[nestedFlows, NESTED_QUEUE]], async (list) => {
    const documents = randomJsonDocuments({ count: 30, seed: SEED + 3 });
    const runs: NestedRun[] = [];
    const readings: Reading[] = [];
    for (const [name, client] of list) {
      for (const [i, text] of documents.entries()) {
        const label = `document ${i} ${name}`;
        const run = await client.startFlow("xj_parent", parseJson(text));
        // As the client would be given it: parseJson's value (ExactNumbers for what a double
        // cannot hold), through the step's payload schema, written back by the client.
        const sent = await client.sendEvent(parent, "event", parseJson(text) as Json, {
          runId: run.runId,
        });
        assert.deepEqual(sent.results.map((r) => r.status), ["delivered"], label);
        runs.push({ runId: run.runId, text, label });
        readings.push({
          what: `${label} waitFor`,
          value: await run.waitFor("completed", { timeoutMs: 30_000 }),
          want: nestedOutput(text),
        });
        const state = await client.getRun(run.runId);
        readings.push({
          what: `${label} getRun event`,
          value: state?.steps.find((s) => s.stepSlug === "event")?.output,
          want: text,
        });
      }
    }
    assert.deepEqual(await nestedMismatches(sql, runs), [], `seed ${SEED}`);
    assert.deepEqual(await differing(sql, readings), [], `seed ${SEED}`);
  });
});

db.test("a start whose input jsonb would change or refuse fails naming the place, and starts nothing", async ({ sql, url }) => {
  const both = clients(url);
  const cases: [unknown, string][] = [
    [{ a: { b: NaN } }, "input.a.b is NaN, which JSON cannot hold (it would be stored as null)"],
    [{ list: [1, Infinity] }, "input.list[1] is Infinity, which JSON cannot hold"],
    [
      { text: "secret\u0000" },
      "input.text is a string with U+0000, which Postgres jsonb cannot store",
    ],
    [["secret\udc00"], "input[0] is a string with a lone surrogate"],
    [{ "\u0000": 1 }, 'input["\uFFFD"] is a key with U+0000'],
    [{ id: 12345678901234567890n }, "input.id is a bigint, which JSON.stringify cannot write"],
  ];
  try {
    const [{ count: before }] = await sql<
      { count: number }[]
    >`select count(*)::int from pgflow.runs`;
    for (const [name, client] of both.list) {
      for (const [input, message] of cases) {
        const error = await client.startFlow("xj_echo", input as never).catch((e) => e);
        assert.ok(error instanceof StartFlowError, `${name}: ${error}`);
        assert.ok(
          error.message.startsWith(`cannot start flow xj_echo: ${message}`),
          `${name}: ${error.message}`,
        );
        assert.doesNotMatch(error.message, /secret/);
      }
    }
    const [{ count: after }] = await sql<
      { count: number }[]
    >`select count(*)::int from pgflow.runs`;
    assert.equal(after, before);
  } finally {
    await both.close();
  }
});
