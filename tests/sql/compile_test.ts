/**
 * pgflow.ensure_flow_compiled: compiled / verified / mismatch / recompiled, grouped steps, several
 * flows and versions on one queue, support sets from persisted routes, and SQL's own validation.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow } from "../../src/dsl/flow.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { withStepQueues } from "../../src/routing/with_step_queues.ts";
import { extractFlowShape, extractRoutePlan } from "../../src/compile/shape.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

function triage(slug: string) {
  return new Flow<{ threadId: string }>({ slug })
    .step({ slug: "classify" }, (i) => ({ label: i.threadId }))
    .step({ slug: "enrich", dependsOn: ["classify"] }, (d) => ({ ...d.classify, rich: true }))
    .step({ slug: "deliverSlack", dependsOn: ["enrich"] }, (d) => d.enrich.rich);
}

function routedTriage(slug: string, slack = "slack_delivery") {
  return routeFlow(triage(slug), {
    queues: { classify: "thread_processing", enrich: "thread_processing", deliverSlack: slack },
  });
}

async function supportSet(sql: Sql, queue: string, flows: string[]) {
  const rows = await sql`select * from pgflow.queue_support_set(${queue}, ${flows}::text[])`;
  return rows.map((r) => `${r.flow_slug}.${r.step_slug}`);
}

db.test("grouped steps: two on one shared queue, one elsewhere; a second compile verifies", async ({ sql }) => {
  assert.deepEqual(await compileFlow(sql, routedTriage("triage_v1")), {
    status: "compiled",
    differences: [],
    optionDifferences: [],
  });
  assert.deepEqual(await compileFlow(sql, routedTriage("triage_v1")), {
    status: "verified",
    differences: [],
    optionDifferences: [],
  });
  const routes =
    await sql`select step_slug, queue_name from pgflow.steps where flow_slug = 'triage_v1' order by step_index`;
  assert.deepEqual(routes.map((r) => `${r.step_slug}=${r.queue_name}`), [
    "classify=thread_processing",
    "enrich=thread_processing",
    "deliverSlack=slack_delivery",
  ]);
  const declared =
    await sql`select queue_name, declared_by_flow from pgflow.shared_queues order by queue_name`;
  assert.deepEqual(declared.map((d) => d.queue_name), ["slack_delivery", "thread_processing"]);
  assert.deepEqual(await supportSet(sql, "thread_processing", ["triage_v1"]), [
    "triage_v1.classify",
    "triage_v1.enrich",
  ]);
  assert.deepEqual(await supportSet(sql, "slack_delivery", ["triage_v1"]), [
    "triage_v1.deliverSlack",
  ]);
});

db.test("two flows and two versions share one queue; support sets follow the given flows", async ({ sql }) => {
  await compileFlow(sql, routedTriage("triage_v1"));
  assert.equal((await compileFlow(sql, routedTriage("triage_v2"))).status, "compiled");
  const digest = routeFlow(
    new Flow<{ day: string }>({ slug: "digest" }).step({ slug: "summarise" }, (i) => i.day),
    {
      queues: { summarise: "thread_processing" },
    },
  );
  assert.equal((await compileFlow(sql, digest)).status, "compiled");
  assert.deepEqual(
    await supportSet(sql, "thread_processing", ["triage_v1", "triage_v2", "digest"]),
    [
      "digest.summarise",
      "triage_v1.classify",
      "triage_v1.enrich",
      "triage_v2.classify",
      "triage_v2.enrich",
    ],
  );
  assert.deepEqual(await supportSet(sql, "thread_processing", ["triage_v2"]), [
    "triage_v2.classify",
    "triage_v2.enrich",
  ]);
  assert.deepEqual(await supportSet(sql, "thread_processing", ["nope"]), []);
  const meta =
    await sql`select count(*)::int as n from pgmq.list_queues() where queue_name = 'thread_processing'`;
  assert.equal(meta[0].n, 1);
});

db.test("a production mismatch changes nothing and tasks keep their queues", async ({ sql }) => {
  await compileFlow(sql, routedTriage("triage_v1"));
  const [run] = await sql`select * from pgflow.start_flow('triage_v1', '{"threadId": "t"}')`;
  const worker = await registerWorker(sql, "thread_processing");
  const [claimed] = await readAndStart(sql, "thread_processing", worker, [[
    "triage_v1",
    "classify",
  ]]);
  const before =
    await sql`select * from pgflow.steps where flow_slug = 'triage_v1' order by step_index`;
  const queuesBefore = await sql`select queue_name from pgmq.list_queues() order by 1`;

  const rerouted = await compileFlow(sql, routedTriage("triage_v1", "slack_delivery_b"));
  assert.equal(rerouted.status, "mismatch");
  assert.deepEqual(rerouted.differences, [
    "route of step deliverSlack: queue slack_delivery stored, slack_delivery_b new",
  ]);
  const reshaped = await compileFlow(
    sql,
    routeFlow(triage("triage_v1").step({ slug: "audit", dependsOn: ["classify"] }, () => 1), {
      queues: {
        classify: "thread_processing",
        enrich: "thread_processing",
        deliverSlack: "slack_delivery",
        audit: "audit_q",
      },
    }),
  );
  assert.equal(reshaped.status, "mismatch");
  assert.ok(
    reshaped.differences.includes("step count: 3 stored, 4 new"),
    reshaped.differences.join("\n"),
  );
  assert.ok(
    reshaped.differences.some((d) =>
      d.startsWith("route of step audit: queue none stored, audit_q new")
    ),
  );

  assert.deepEqual(
    await sql`select * from pgflow.steps where flow_slug = 'triage_v1' order by step_index`,
    before,
  );
  assert.deepEqual(
    await sql`select queue_name from pgmq.list_queues() order by 1`,
    queuesBefore,
    "no queue created",
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.shared_queues where queue_name in ('slack_delivery_b', 'audit_q')`)[
      0
    ].n,
    0,
  );
  // The started task still completes through its snapshot, and the next step goes to the old route.
  await sql`select pgflow.complete_task(${run.run_id}, 'classify', 0, '{"label": "x"}', ${claimed.attempt})`;
  assert.equal(claimed.disposition, "claimed");
  const [task] =
    await sql`select queue_name from pgflow.step_tasks where run_id = ${run.run_id} and step_slug = 'enrich'`;
  assert.equal(task.queue_name, "thread_processing");
});

db.test("local development recompiles in place; other flows' and unknown messages on the shared queue survive", async ({ sql }) => {
  await compileFlow(sql, routedTriage("triage_v1"));
  await compileFlow(sql, routedTriage("triage_v2"));
  const [mine] = await sql`select * from pgflow.start_flow('triage_v1', '{"threadId": "mine"}')`;
  const [theirs] =
    await sql`select * from pgflow.start_flow('triage_v2', '{"threadId": "theirs"}')`;
  const [{ send: foreign }] =
    await sql`select * from pgmq.send('thread_processing', '{"hello": 1}'::jsonb)`;
  const mineMsg =
    (await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${mine.run_id}`)[
      0
    ].id;
  const theirsMsg =
    (await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${theirs.run_id}`)[
      0
    ].id;

  await sql`select pgflow.set_local_development(true)`;
  const result = await compileFlow(sql, routedTriage("triage_v1", "slack_delivery_b"));
  assert.equal(result.status, "recompiled");
  assert.deepEqual(result.differences, [
    "route of step deliverSlack: queue slack_delivery stored, slack_delivery_b new",
  ]);

  const live = (await queueMessages(sql, "thread_processing")).map((m) => m.msg_id).sort();
  assert.deepEqual(live, [foreign, theirsMsg].sort(), "only triage_v1's message is gone");
  assert.ok(!live.includes(mineMsg));
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.runs where flow_slug = 'triage_v1'`)[0].n,
    0,
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.runs where flow_slug = 'triage_v2'`)[0].n,
    1,
  );
  const [route] =
    await sql`select queue_name from pgflow.steps where flow_slug = 'triage_v1' and step_slug = 'deliverSlack'`;
  assert.equal(route.queue_name, "slack_delivery_b");
  const queues = (await sql`select queue_name from pgmq.list_queues()`).map((q) => q.queue_name);
  assert.ok(
    queues.includes("thread_processing") && queues.includes("slack_delivery"),
    "shared queues are never dropped",
  );
  await sql`select pgflow.set_local_development(false)`;
  assert.equal((await compileFlow(sql, routedTriage("triage_v1"))).status, "mismatch");
});

db.test("SQL validates the definition itself and creates nothing for a bad one", async ({ sql }) => {
  const flow = triage("bad_defs");
  const shape = extractFlowShape(flow);
  const plan = extractRoutePlan(routeFlow(flow, {
    queues: { classify: "bad_q", enrich: "bad_q", deliverSlack: "bad_q" },
  }));
  const cases: [string, unknown, unknown, RegExp][] = [
    [
      "missing step",
      shape,
      { mode: "routed", queues: { classify: "bad_q", enrich: "bad_q" } },
      /no queue for step\(s\) deliverSlack/,
    ],
    [
      "unknown step",
      shape,
      { ...plan, queues: { ...plan.queues, ghost: "bad_q" } },
      /names unknown step\(s\) ghost/,
    ],
    [
      "uppercase",
      shape,
      { ...plan, queues: { ...plan.queues, enrich: "Bad_Q" } },
      /invalid shared queue name 'Bad_Q'/,
    ],
    [
      "double underscore",
      shape,
      { ...plan, queues: { ...plan.queues, enrich: "bad__q" } },
      /invalid shared queue name 'bad__q'/,
    ],
    [
      "too long",
      shape,
      { ...plan, queues: { ...plan.queues, enrich: "q".repeat(48) } },
      /invalid shared queue name/,
    ],
    ["injection", shape, {
      ...plan,
      queues: { ...plan.queues, enrich: "q; drop table pgflow.flows" },
    }, /invalid shared queue name/],
    ["wrong private name", shape, {
      mode: "step",
      queues: {
        classify: "bad_defs__x",
        enrich: "bad_defs__enrich",
        deliverSlack: "bad_defs__deliverslack",
      },
    }, /step classify: step-mode queue must be bad_defs__classify, got bad_defs__x/],
    ["flow queue", shape, {
      mode: "flow",
      queues: { classify: "bad_defs", enrich: "other", deliverSlack: "bad_defs" },
    }, /step enrich: flow-mode queue must be bad_defs, got other/],
    ["mode", shape, { mode: "fifo", queues: {} }, /mode must be flow, step or routed/],
    ["no queues", shape, { mode: "routed" }, /route plan must have a "queues" object/],
    ["queues not an object", shape, { mode: "flow", queues: ["bad_defs"] }, /"queues" object/],
    ["forward dependency", { steps: [{ ...shape.steps[1], index: 0 }] }, {
      mode: "routed",
      queues: { enrich: "bad_q" },
    }, /dependency "classify" is not an earlier step/],
    ["not a shape", { nope: 1 }, plan, /shape must be an object with a "steps" array/],
  ];
  for (const [what, s, p, message] of cases) {
    await assert.rejects(
      () =>
        sql`select pgflow.ensure_flow_compiled('bad_defs', ${sql.json(s as never)}, ${
          sql.json(p as never)
        })`,
      (e: { code?: string; message: string }) => {
        assert.match(e.message, message, what);
        assert.equal(e.code, "22023", `${what}: ${e.message}`);
        return true;
      },
    );
  }
  await assert.rejects(
    () =>
      sql`select pgflow.ensure_flow_compiled('bad-defs', ${sql.json(shape as never)}, ${
        sql.json(plan as never)
      })`,
    /invalid flow slug 'bad-defs'/,
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'bad_defs'`)[0].n,
    0,
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgmq.list_queues() where queue_name like 'bad%'`)[0]
      .n,
    0,
  );
});

db.test("plain and step-queued flows compile with their own queues; slugs collide case-insensitively", async ({ sql }) => {
  const plain = new Flow<{ n: number }>({ slug: "Plain_Compile", maxAttempts: 5 }).step({
    slug: "a",
    timeout: 9,
  }, (i) => i.n);
  assert.equal((await compileFlow(sql, plain)).status, "compiled");
  const [flow] =
    await sql`select queue_mode, opt_max_attempts from pgflow.flows where flow_slug = 'Plain_Compile'`;
  assert.deepEqual([flow.queue_mode, flow.opt_max_attempts], ["flow", 5]);
  const [step] =
    await sql`select queue_name, opt_timeout from pgflow.steps where flow_slug = 'Plain_Compile'`;
  assert.deepEqual([step.queue_name, step.opt_timeout], ["plain_compile", 9]);
  const private_ = withStepQueues(
    new Flow<{ n: number }>({ slug: "priv_compile" }).step({ slug: "a" }, (i) => i.n),
  );
  assert.equal((await compileFlow(sql, private_)).status, "compiled");
  assert.deepEqual(await supportSet(sql, "priv_compile__a", ["priv_compile"]), ["priv_compile.a"]);
  await assert.rejects(
    () =>
      compileFlow(
        sql,
        new Flow<{ n: number }>({ slug: "plain_compile" }).step({ slug: "a", timeout: 9 }, (i) =>
          i.n),
      ),
    /flow plain_compile conflicts with existing flow Plain_Compile/,
  );
});

db.test("changed options are reported, not applied; local development recompiles with them", async ({ sql }) => {
  const flow = (maxAttempts: number, timeout?: number) =>
    new Flow<{ n: number }>({ slug: "opt_drift", maxAttempts })
      .step({ slug: "a", ...(timeout === undefined ? {} : { timeout }) }, (i) => i.n);
  assert.equal((await compileFlow(sql, flow(3))).status, "compiled");
  // Unset values compare as what is stored for them: the flow defaults, NULL for a step's own.
  assert.deepEqual(await compileFlow(sql, flow(3)), {
    status: "verified",
    differences: [],
    optionDifferences: [],
  });
  const drift = await compileFlow(sql, flow(7, 90));
  assert.deepEqual(drift, {
    status: "verified",
    differences: [],
    optionDifferences: [
      { step: null, option: "maxAttempts", stored: 3, supplied: 7 },
      { step: "a", option: "timeout", stored: null, supplied: 90 },
    ],
  });
  const stored = async () =>
    (await sql`select f.opt_max_attempts as flow_max, s.opt_timeout as step_timeout
      from pgflow.flows f join pgflow.steps s using (flow_slug) where f.flow_slug = 'opt_drift'`)[
      0
    ];
  assert.deepEqual({ ...await stored() }, { flow_max: 3, step_timeout: null }, "nothing applied");

  await sql`select pgflow.set_local_development(true)`;
  const local = await compileFlow(sql, flow(7, 90));
  assert.equal(local.status, "recompiled");
  assert.deepEqual(local.differences, [
    "flow: maxAttempts 3 stored, 7 new",
    "step a: timeout unset stored, 90 new",
  ]);
  assert.deepEqual({ ...await stored() }, { flow_max: 7, step_timeout: 90 });
  await sql`select pgflow.set_local_development(false)`;
  assert.deepEqual((await compileFlow(sql, flow(7, 90))).optionDifferences, []);
});
