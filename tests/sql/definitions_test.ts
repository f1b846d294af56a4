/** Definitions: slug and queue-name rules shared with TypeScript, create_flow and add_step. */
import assert from "node:assert/strict";
import { validateSlug } from "../../src/dsl/slug.ts";
import { privateQueueName } from "../../src/routing/private_queue.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const SLUGS = [
  "a",
  "A",
  "abc",
  "a1",
  "a_b",
  "a_b_c",
  "Thread_Triage_V1",
  "x".repeat(128),
  "x".repeat(129),
  "",
  "_a",
  "a_",
  "a__b",
  "1a",
  "a-b",
  "a b",
  "a.b",
  "run",
  "Run",
  "RUN",
  "running",
  "é",
  "a$",
  "a;b",
  "a'b",
  "ab\n",
  "\u0000",
];

db.test("SQL and TypeScript agree on every slug", async ({ sql }) => {
  for (const slug of SLUGS) {
    const [{ ok }] = await sql`select pgflow.is_valid_slug(${slug.replaceAll("\u0000", "")}) as ok`;
    let ts = true;
    try {
      validateSlug(slug.replaceAll("\u0000", ""));
    } catch {
      ts = false;
    }
    assert.equal(ok, ts, `slug ${JSON.stringify(slug)}: SQL says ${ok}, TypeScript says ${ts}`);
  }
});

db.test("SQL resolves private queue names exactly like the shared case table", async ({ sql }) => {
  const table = JSON.parse(
    await Deno.readTextFile(new URL("../fixtures/private_queue_names.json", import.meta.url)),
  ) as {
    cases: { flow_slug: string; step_slug: string; step_index: number; expected_queue?: string }[];
  };
  assert.ok(table.cases.length >= 6);
  for (const c of table.cases) {
    let fromSql: string | undefined;
    try {
      [{ q: fromSql }] =
        await sql`select pgflow.private_queue_name(${c.flow_slug}, ${c.step_slug}, ${c.step_index}) as q`;
    } catch (err) {
      assert.match(String(err), /does not fit in 47 characters/);
    }
    assert.equal(fromSql, c.expected_queue, `${c.flow_slug}.${c.step_slug}`);
    let fromTs: string | undefined;
    try {
      fromTs = privateQueueName(c.flow_slug, c.step_slug, c.step_index);
    } catch { /* an expected error */ }
    assert.equal(fromTs, fromSql);
  }
});

db.test("create_flow creates the default queue and is idempotent for identical input", async ({ sql }) => {
  await sql`select pgflow.create_flow('Plain_Flow', 5, 2, 30)`;
  await sql`select pgflow.create_flow('Plain_Flow', 5, 2, 30)`;
  const queues =
    await sql`select queue_name from pgmq.list_queues() where queue_name = 'plain_flow'`;
  assert.equal(queues.length, 1);
  const [flow] = await sql`select * from pgflow.flows where flow_slug = 'Plain_Flow'`;
  assert.deepEqual(
    [flow.opt_max_attempts, flow.opt_base_delay, flow.opt_timeout, flow.queue_mode],
    [5, 2, 30, "flow"],
  );
  await assert.rejects(
    () => sql`select pgflow.create_flow('Plain_Flow', 6, 2, 30)`,
    /flow Plain_Flow already exists with a different definition/,
  );
  await assert.rejects(
    () => sql`select pgflow.create_flow('plain_flow')`,
    /already exists with a different definition \(existing: slug Plain_Flow/,
  );
});

db.test("bad definitions get errors that name the value", async ({ sql }) => {
  const cases: [string, () => Promise<unknown>, RegExp][] = [
    ["bad slug", () => sql`select pgflow.create_flow('bad-slug')`, /invalid flow slug 'bad-slug'/],
    ["null slug", () => sql`select pgflow.create_flow(null)`, /invalid flow slug NULL/],
    ["reserved", () => sql`select pgflow.create_flow('run')`, /invalid flow slug 'run'/],
    [
      "attempts",
      () => sql`select pgflow.create_flow('f_att', 0)`,
      /flow f_att: maxAttempts \(max_attempts\) must be an integer between 1 and 1000, got 0/,
    ],
    [
      "delay",
      () => sql`select pgflow.create_flow('f_del', 3, -1)`,
      /flow f_del: baseDelay \(base_delay\) must be an integer between 1 and 31536000, got -1/,
    ],
    [
      "timeout",
      () => sql`select pgflow.create_flow('f_to', 3, 1, 2)`,
      /flow f_to: timeout \(timeout\) must be an integer between 3 and 31536000, got 2/,
    ],
    [
      "mode",
      () => sql`select pgflow.create_flow('f_mode', 3, 1, 60, 'fifo')`,
      /queue_mode must be flow, step or routed, got fifo/,
    ],
    ["unknown flow", () => sql`select pgflow.add_step('nope', 'a')`, /flow 'nope' does not exist/],
  ];
  for (const [what, call, message] of cases) await assert.rejects(call, message, what);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.flows`)[0].n,
    1,
    "only Plain_Flow from before",
  );
});

db.test("add_step validates steps, dependencies, options and routes", async ({ sql }) => {
  await sql`select pgflow.create_flow('steps_f', 3, 1, 60, 'routed')`;
  await sql`select pgflow.add_step('steps_f', 'first', queue_name => 'steps_q')`;
  const cases: [() => Promise<unknown>, RegExp][] = [
    [
      () => sql`select pgflow.add_step('steps_f', 'FIRST', queue_name => 'steps_q')`,
      /step steps_f\.first already exists with a different definition/,
    ],
    [
      () => sql`select pgflow.add_step('steps_f', 'two__bars', queue_name => 'steps_q')`,
      /invalid step slug 'two__bars'/,
    ],
    [
      () => sql`select pgflow.add_step('steps_f', 'second', '{ghost}', queue_name => 'steps_q')`,
      /depends on unknown step\(s\) \{ghost\}/,
    ],
    [
      () =>
        sql`select pgflow.add_step('steps_f', 'second', '{first,first}', queue_name => 'steps_q')`,
      /lists a dependency twice/,
    ],
    [
      () =>
        sql`select pgflow.add_step('steps_f', 'second', max_attempts => 0, queue_name => 'steps_q')`,
      /step steps_f\.second: maxAttempts \(max_attempts\) must be an integer between 1 and 1000, got 0/,
    ],
    [
      () =>
        sql`select pgflow.add_step('steps_f', 'second', start_delay => -1, queue_name => 'steps_q')`,
      /startDelay \(start_delay\) must be an integer between 0 and 31536000, got -1/,
    ],
    [
      () => sql`select pgflow.add_step('steps_f', 'second', queue_name => 'Steps_Q')`,
      /invalid queue name 'Steps_Q'/,
    ],
    [
      () => sql`select pgflow.add_step('steps_f', 'second', queue_name => 'a__b')`,
      /invalid queue name 'a__b'/,
    ],
    [
      () => sql`select pgflow.add_step('steps_f', 'second', queue_name => ${"q".repeat(48)})`,
      /invalid queue name/,
    ],
    [() => sql`select pgflow.add_step('steps_f', 'second')`, /invalid queue name NULL/],
    [
      () =>
        sql`select pgflow.add_step('steps_f', 'second', '{first}', step_type => 'reduce', queue_name => 'steps_q')`,
      /step_type must be single or map, got reduce/,
    ],
  ];
  for (const [call, message] of cases) await assert.rejects(call, message);
  // Identical input is accepted again; the same slug with another queue is not.
  await sql`select pgflow.add_step('steps_f', 'first', queue_name => 'steps_q')`;
  await assert.rejects(
    () => sql`select pgflow.add_step('steps_f', 'first', queue_name => 'steps_q2')`,
    /already exists/,
  );
  const steps =
    await sql`select step_slug, step_index, queue_name from pgflow.steps where flow_slug = 'steps_f'`;
  assert.deepEqual(steps.map((s) => [s.step_slug, s.step_index, s.queue_name]), [[
    "first",
    0,
    "steps_q",
  ]]);
});

db.test("queue modes resolve each step's route", async ({ sql }) => {
  await defineFlow(sql, "Mode_Flow", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  await defineFlow(sql, "Mode_Step", [{ slug: "a" }, { slug: "Bee", deps: ["a"] }], {
    mode: "step",
  });
  const routes = await sql`select flow_slug, step_slug, queue_name from pgflow.steps
                           where flow_slug like 'Mode_%' order by flow_slug, step_index`;
  assert.deepEqual(routes.map((r) => `${r.flow_slug}.${r.step_slug}=${r.queue_name}`), [
    "Mode_Flow.a=mode_flow",
    "Mode_Flow.b=mode_flow",
    "Mode_Step.a=mode_step__a",
    "Mode_Step.Bee=mode_step__bee",
  ]);
  const listed = (await sql`select queue_name from pgmq.list_queues()`).map((q) => q.queue_name);
  for (const q of ["mode_flow", "mode_step__a", "mode_step__bee"]) assert.ok(listed.includes(q), q);
  await assert.rejects(
    () => sql`select pgflow.add_step('Mode_Flow', 'c', queue_name => 'elsewhere')`,
    /runs on the flow queue mode_flow, not elsewhere/,
  );
  const [run] = await sql`select * from pgflow.start_flow('Mode_Step', '{}')`;
  assert.equal((await queueMessages(sql, "mode_step__a")).length, 1);
  assert.ok(run.run_id);
});

db.test("start_flow rejects unknown flows and SQL NULL input, and accepts a JSON null", async ({ sql }) => {
  await defineFlow(sql, "starter", [{ slug: "a" }]);
  await assert.rejects(
    () => sql`select pgflow.start_flow('ghost', '{}')`,
    /flow 'ghost' does not exist/,
  );
  await assert.rejects(
    () => sql`select pgflow.start_flow('starter', null)`,
    /flow starter: input must not be SQL NULL/,
  );
  const [run] =
    await sql`select * from pgflow.start_flow('starter', 'null'::jsonb, '00000000-0000-4000-8000-000000000001')`;
  assert.equal(run.run_id, "00000000-0000-4000-8000-000000000001");
  await assert.rejects(
    () => sql`select pgflow.start_flow('starter', '{}', '00000000-0000-4000-8000-000000000001')`,
    /run 00000000-0000-4000-8000-000000000001 already exists/,
  );
  await sql`select pgflow.create_flow('empty_flow')`;
  const [empty] = await sql`select * from pgflow.start_flow('empty_flow', '{}')`;
  assert.deepEqual([empty.status, empty.output], ["completed", {}]);
});
