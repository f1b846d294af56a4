/**
 * pgflow.start_flows: many runs of one flow from one call. Its runs must be exactly the runs
 * start_flow makes (rows, messages, notifications), their ids in input order; a refused call
 * names the element and starts nothing; it is granted as start_flow is.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { asRole, ensureClientRoles } from "../support/roles.ts";
import {
  allNotified,
  defineFlow,
  queueMessages,
  type StoredMessage,
  waitForNotifications,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

type Sql = Parameters<typeof queueMessages>[0];

/** A run's rows, without its ids and times: what start_flow and start_flows must both make. */
async function runShape(sql: Sql, runId: string) {
  const [run] = await sql`
    select flow_slug, status, input, remaining_steps, started_as, priority, traceparent
    from pgflow.runs where run_id = ${runId}`;
  const states = await sql`
    select step_slug, status, remaining_deps, initial_tasks, remaining_tasks,
           started_at is not null as started
    from pgflow.step_states where run_id = ${runId} order by step_slug`;
  const tasks = await sql`
    select step_slug, task_index, status, queue_name, message_id is not null as sent, input,
           limit_scope, priority
    from pgflow.step_tasks where run_id = ${runId} order by step_slug, task_index`;
  return {
    run: { ...run },
    states: states.map((r) => ({ ...r })),
    tasks: tasks.map((r) => ({ ...r })),
  };
}

/** Each task's message, found by its snapshot, and the body it carries. */
async function bodiesOf(sql: Sql, queue: string, runIds: string[]): Promise<StoredMessage[]> {
  const messages = await queueMessages(sql, queue);
  const tracked = await sql<{ message_id: string }[]>`
    select message_id::text from pgflow.step_tasks
    where run_id = any(${runIds}::uuid[]) and queue_name = ${queue}`;
  const ids = new Set(tracked.map((t) => t.message_id));
  return messages.filter((m) => ids.has(String(m.msg_id)));
}

db.test("run ids come back in input order, each run with its own input and start_flow's rows", async ({ sql, connect }) => {
  const shape = [
    { slug: "a", queue: "sfs_q1" },
    { slug: "b", queue: "sfs_q2" },
    { slug: "c", deps: ["a", "b"], queue: "sfs_q1" },
  ];
  await defineFlow(sql, "sfs_plain", shape, { mode: "routed" });
  const listener = connect();
  const heard: string[] = [];
  for (const q of ["sfs_q1", "sfs_q2"]) {
    await listener.listen(`pgflow_queue:${q}`, () => heard.push(q));
  }
  await waitForNotifications(listener, ["pgflow_queue:sfs_q1", "pgflow_queue:sfs_q2"]);

  const inputs = Array.from({ length: 2_500 }, (_, i) => ({ i }));
  const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  const [{ run_ids: ids, run_flow_slug }] = await sql<
    { run_ids: string[]; run_flow_slug: string }[]
  >`select * from pgflow.start_flows('sfs_plain', ${sql.json(inputs)}, 7, ${trace})`;
  assert.equal(run_flow_slug, "sfs_plain");
  assert.equal(ids.length, inputs.length);
  assert.equal(new Set(ids).size, ids.length);
  const stored = await sql<{ run_id: string; i: number }[]>`
    select run_id, (input ->> 'i')::int as i from pgflow.runs where run_id = any(${ids}::uuid[])`;
  const indexOf = new Map(stored.map((r) => [r.run_id, r.i]));
  assert.deepEqual(ids.map((id) => indexOf.get(id)), inputs.map((x) => x.i));

  // One notification per queue for the whole call (Postgres folds equal ones of a transaction).
  await allNotified(listener, sql);
  assert.deepEqual(heard.sort(), ["sfs_q1", "sfs_q2"]);

  // The same rows as start_flow's, for a run at either end and one in the middle (the slices of
  // 1,000 messages must each pair every id with its own run).
  const [single] = await sql`
    select run_id from pgflow.start_flow('sfs_plain', '{"i": 1500}', null, 7, ${trace})`;
  const expected = await runShape(sql, single.run_id);
  assert.deepEqual(await runShape(sql, ids[1500]), expected);
  for (const at of [0, 999, 1000, 2499]) {
    const shapeAt = await runShape(sql, ids[at]);
    assert.deepEqual(shapeAt.run.input, { i: at });
    assert.deepEqual({ ...shapeAt, run: { ...shapeAt.run, input: null } }, {
      ...expected,
      run: { ...expected.run, input: null },
    });
  }
  for (const queue of ["sfs_q1", "sfs_q2"]) {
    const bodies = await bodiesOf(sql, queue, ids);
    assert.equal(bodies.length, ids.length, queue);
    const taskOf = await sql<{ message_id: string; run_id: string; step_slug: string }[]>`
      select message_id::text, run_id, step_slug from pgflow.step_tasks
      where run_id = any(${ids}::uuid[]) and queue_name = ${queue}`;
    const byMessage = new Map(taskOf.map((t) => [t.message_id, t]));
    for (const m of bodies) {
      const task = byMessage.get(String(m.msg_id))!;
      assert.deepEqual(m.message, {
        flow_slug: "sfs_plain",
        run_id: task.run_id,
        step_slug: task.step_slug,
        task_index: 0,
      });
    }
  }
});

db.test("an alias is resolved and recorded; an empty array starts nothing", async ({ sql }) => {
  await defineFlow(sql, "sfs_v1", [{ slug: "a" }]);
  await sql`insert into pgflow.aliases (alias, flow_slug) values ('sfs_alias', 'sfs_v1')`;
  const [r] = await sql<{ run_ids: string[]; run_flow_slug: string }[]>`
    select * from pgflow.start_flows('sfs_alias', '[{"n": 1}, {"n": 2}]')`;
  assert.equal(r.run_flow_slug, "sfs_v1");
  const runs = await sql`select flow_slug, started_as from pgflow.runs
                         where run_id = any(${r.run_ids}::uuid[])`;
  assert.deepEqual(runs.map((x) => [x.flow_slug, x.started_as]), [
    ["sfs_v1", "sfs_alias"],
    ["sfs_v1", "sfs_alias"],
  ]);
  const [empty] = await sql`select * from pgflow.start_flows('sfs_v1', '[]')`;
  assert.deepEqual(empty.run_ids, []);
  const [{ n }] = await sql`select count(*)::int as n from pgflow.runs where flow_slug = 'sfs_v1'`;
  assert.equal(n, 2);
});

/**
 * A shape without what a concurrency limit decides by arrival: whether a task was sent at once or
 * waits depends on the tasks before it, not on how its run was started.
 */
function comparable(shape: Awaited<ReturnType<typeof runShape>>) {
  return {
    ...shape,
    tasks: shape.tasks.map((t) => t.limit_scope === null ? t : { ...t, status: "-", sent: "-" }),
  };
}

db.test("roots with a condition, a map, a concurrency limit, and a flow without steps: each run as start_flow makes it", async ({ sql }) => {
  await defineFlow(sql, "sfs_cond", [{ slug: "a" }, { slug: "b" }]);
  await sql`update pgflow.steps set required_input_pattern = '{"go": true}'::jsonb, when_unmet = 'skip'
            where flow_slug = 'sfs_cond' and step_slug = 'a'`;
  await defineFlow(sql, "sfs_map", [{ slug: "m", type: "map" }, { slug: "t", deps: ["m"] }]);
  await defineFlow(sql, "sfs_limited", [{ slug: "s" }]);
  await sql`select pgflow.set_step_flow_control('sfs_limited', 's', concurrency => 1)`;
  await defineFlow(sql, "sfs_empty", []);

  const cases: [string, unknown[]][] = [
    ["sfs_cond", [{ go: true }, { go: false }]],
    ["sfs_map", [[1, 2, 3], [], ["x"]]],
    ["sfs_limited", [{ k: 1 }, { k: 2 }, { k: 3 }]],
    ["sfs_empty", [{}, {}]],
  ];
  for (const [flow, inputs] of cases) {
    const [{ run_ids: ids }] = await sql<{ run_ids: string[] }[]>`
      select run_ids from pgflow.start_flows(${flow}, ${sql.json(inputs as never)})`;
    assert.equal(ids.length, inputs.length, flow);
    for (const [i, input] of inputs.entries()) {
      const [one] = await sql`select run_id from pgflow.start_flow(${flow}, ${
        sql.json(input as never)
      })`;
      assert.deepEqual(
        comparable(await runShape(sql, ids[i])),
        comparable(await runShape(sql, one.run_id)),
        `${flow}[${i}]`,
      );
    }
  }
  // The limit holds across the bulk start: one task of the limited step is sent, the rest wait.
  const limited = await sql`select status, count(*)::int as n from pgflow.step_tasks
                            where flow_slug = 'sfs_limited' group by status order by status`;
  assert.deepEqual(limited.map((r) => [r.status, r.n]), [["queued", 1], ["waiting", 5]]);
});

db.test("a refused call names what is wrong (the element's index for a bad element) and starts nothing", async ({ sql }) => {
  await defineFlow(sql, "sfs_bad", [{ slug: "a" }]);
  await defineFlow(sql, "sfs_badmap", [{ slug: "m", type: "map" }]);
  const refusals: [ReturnType<typeof sql>, RegExp][] = [
    [sql`select * from pgflow.start_flows('sfs_nope', '[{}]')`, /flow 'sfs_nope' does not exist/],
    [
      sql`select * from pgflow.start_flows('sfs_bad', '{"not": "an array"}')`,
      /sfs_bad: inputs must be a JSON array of run inputs, got object/,
    ],
    [
      sql`select * from pgflow.start_flows('sfs_bad', null)`,
      /inputs must be a JSON array of run inputs, got SQL NULL/,
    ],
    [
      sql`select * from pgflow.start_flows('sfs_badmap', '[[1], [2], {"x": 1}, "y"]')`,
      /sfs_badmap: inputs\[2\] is a JSON object, but the flow's root step maps over its input/,
    ],
    [
      sql`select * from pgflow.start_flows('sfs_bad', '[{}]', 5000)`,
      /priority must be an integer between -1000 and 1000, got 5000/,
    ],
    [
      sql`select * from pgflow.start_flows('sfs_bad', '[{}]', 0, 'not-a-trace')`,
      /traceparent 'not-a-trace' is not a W3C trace context/,
    ],
    [
      sql`select * from pgflow.start_flows('sfs_bad',
            (select jsonb_agg(g) from generate_series(1, 100001) g))`,
      /sfs_bad: 100001 inputs in one call, at most 100000 are accepted/,
    ],
  ];
  for (const [query, message] of refusals) await assert.rejects(query, message);
  const [{ runs, tasks }] = await sql`
    select (select count(*)::int from pgflow.runs where flow_slug like 'sfs_bad%') as runs,
           (select count(*)::int from pgflow.step_tasks where flow_slug like 'sfs_bad%') as tasks`;
  assert.deepEqual([runs, tasks], [0, 0]);
});

db.test("privileges: service_role may start_flows, as it may start_flow; anon and authenticated may not", async ({ sql }) => {
  await defineFlow(sql, "sfs_priv", [{ slug: "a" }]);
  await ensureClientRoles(sql);
  const as = (role: string, query: string) => asRole(sql, role, query);
  for (const role of ["anon", "authenticated"]) {
    await assert.rejects(
      as(role, `select * from pgflow.start_flows('sfs_priv', '[{}]')`),
      /permission denied/,
      role,
    );
  }
  const [r] = await as("service_role", `select * from pgflow.start_flows('sfs_priv', '[{}, {}]')`);
  assert.equal(r.run_ids.length, 2);
  // Granted exactly as start_flow: the same roles may execute both.
  const grants = await sql`
    select f.proname, array_agg(r.rolname order by r.rolname) as roles
    from pg_proc f cross join pg_roles r
    where f.pronamespace = 'pgflow'::regnamespace and f.proname in ('start_flow', 'start_flows')
      and r.rolname in ('service_role', 'anon', 'authenticated', 'public')
      and has_function_privilege(r.oid, f.oid, 'execute')
    group by f.proname order by f.proname`;
  assert.deepEqual(grants.map((g) => [g.proname, g.roles]), [
    ["start_flow", ["service_role"]],
    ["start_flows", ["service_role"]],
  ]);
});
