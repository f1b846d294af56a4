/**
 * Child flows in SQL: a step whose work is a run of another flow starts its child when it is
 * ready, holds no message, and moves when the child ends, in the child's finishing transaction.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { compileFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";
import { toRunState } from "../../src/client/snapshot.ts";
import { formatRun } from "../../src/cli/runs/format.ts";
import { stepTraceparent } from "../../src/telemetry/span_ids.ts";
import { readOnly } from "../../src/cli/dashboard/read_only.ts";
import { readRun } from "../../src/cli/dashboard/run_view.ts";

const db = testDatabase(import.meta.url);

const enrich = new Flow<{ id: string }>({ slug: "enrich_v1", maxAttempts: 1 })
  .step({ slug: "profile" }, (input) => ({ name: input.id }));

const onboard = new Flow<{ customer: { id: string; plan: string } }>({ slug: "onboard_v1" })
  .subflow({
    slug: "enriched",
    flow: enrich,
    input: (input) => ({ id: input.customer.id }),
  })
  .step({ slug: "greet", dependsOn: ["enriched"] }, (deps) => deps.enriched.profile.name);

const onboardAll = new Flow<{ ids: string[] }>({ slug: "onboard_all_v1" })
  .array({ slug: "ids" }, (input) => input.ids)
  .subflowMap({ slug: "each", array: "ids", flow: enrich, input: (id) => ({ id }) })
  .step({ slug: "count", dependsOn: ["each"] }, (deps) => deps.each.length);

const onboardSkip = new Flow<string[]>({ slug: "onboard_skip_v1" })
  .subflowMap({ slug: "each", flow: enrich, input: (id) => ({ id }), whenExhausted: "skip" });

/** Compiles the flows (the file's tests share one database) and ends the earlier tests' runs. */
async function compileAll(sql: Sql): Promise<void> {
  for (const flow of [enrich, onboard, onboardAll, onboardSkip]) {
    const { status, differences } = await compileFlow(
      sql,
      routeFlow(flow, { queues: allOn(flow) }),
    );
    assert.ok(status === "compiled" || status === "verified", differences.join("; "));
  }
  await sql`select pgflow.cancel_run(run_id) from pgflow.runs where status = 'started' and parent_run_id is null`;
}

function allOn(flow: { stepOrder: readonly string[] }): never {
  return Object.fromEntries(flow.stepOrder.map((s) => [s, "accounts"])) as never;
}

/** Claims and completes every visible task of `flow`.`step` on the shared queue with `fn`. */
async function completeTasks(
  sql: Sql,
  flow: string,
  step: string,
  fn: (input: unknown) => unknown,
): Promise<number> {
  const worker = await registerWorker(sql, "accounts");
  const rows = (await readAndStart(sql, "accounts", worker, [[flow, step]], 1000))
    .filter((r) => r.disposition === "claimed");
  for (const r of rows) {
    await sql`select pgflow.complete_task(${r.run_id}, ${step}, ${r.task_index}, ${
      sql.json(fn(r.input) as never)
    }, ${r.attempt})`;
  }
  return rows.length;
}

async function failTasks(sql: Sql, flow: string, step: string, when: (input: unknown) => boolean) {
  const worker = await registerWorker(sql, "accounts");
  const rows = (await readAndStart(sql, "accounts", worker, [[flow, step]], 1000))
    .filter((r) => r.disposition === "claimed");
  for (const r of rows) {
    if (when(r.input)) {
      await sql`select pgflow.fail_task(${r.run_id}, ${step}, ${r.task_index}, 'boom', ${r.attempt})`;
    } else {
      await sql`select pgflow.complete_task(${r.run_id}, ${step}, ${r.task_index}, ${
        sql.json({ name: (r.input as { id: string }).id } as never)
      }, ${r.attempt})`;
    }
  }
}

db.test("a child starts when its step is ready, with the input picked in SQL, and no message", async ({ sql }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_v1',
    '{"customer": {"id": "c1", "plan": "pro"}}', traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')`;
  const [child] = await sql`select * from pgflow.runs where parent_run_id = ${parent.run_id}`;
  assert.equal(child.flow_slug, "enrich_v1");
  assert.deepEqual(child.input, { id: "c1" });
  assert.deepEqual([child.parent_step_slug, child.parent_task_index], ["enriched", 0]);
  // In the parent's trace, under the step's span (the id the worker gives that span).
  assert.equal(child.traceparent, stepTraceparent(parent.run_id, "enriched", parent.traceparent));
  const [task] = await sql`select * from pgflow.step_tasks where run_id = ${parent.run_id}`;
  assert.deepEqual([task.status, task.message_id, task.child_run_id], [
    "started",
    null,
    child.run_id,
  ]);
  // The only message on the queue is the child's own step's.
  const bodies = (await queueMessages(sql, "accounts")).map((m) => m.message);
  assert.deepEqual(bodies.map((b) => (b as { flow_slug: string }).flow_slug), ["enrich_v1"]);
  // Stalled recovery has nothing to take back from a waiting parent, however old its task.
  await sql`update pgflow.step_tasks set started_at = now() - interval '1 day' where run_id = ${parent.run_id}`;
  assert.equal((await sql`select pgflow.requeue_stalled_tasks() as n`)[0].n, 0);
});

db.test("the child's completion completes the parent's step in the same transaction", async ({ sql }) => {
  await compileAll(sql);
  const [parent] =
    await sql`select * from pgflow.start_flow('onboard_v1', '{"customer": {"id": "c2", "plan": "x"}}')`;
  const worker = await registerWorker(sql, "accounts");
  const [claim] = (await readAndStart(sql, "accounts", worker, [["enrich_v1", "profile"]]))
    .filter((r) => r.disposition === "claimed");
  const seen = await sql.begin(async (tx) => {
    await tx`select pgflow.complete_task(${claim.run_id}, 'profile', 0, '{"name": "Ada"}', ${claim.attempt})`;
    return await tx`select step_slug, status, output from pgflow.step_states
                    where run_id = ${parent.run_id} order by step_slug`;
  });
  assert.deepEqual(seen.map((s) => [s.step_slug, s.status, s.output]), [
    ["enriched", "completed", { profile: { name: "Ada" } }],
    ["greet", "started", null],
  ]);
  assert.equal(await completeTasks(sql, "onboard_v1", "greet", () => "hi"), 1);
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${parent.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { greet: "hi" }]);
});

db.test("a map starts one child per element and aggregates their outputs in index order", async ({ sql }) => {
  await compileAll(sql);
  const [parent] =
    await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": ["a", "b", "c"]}')`;
  await completeTasks(sql, "onboard_all_v1", "ids", () => ["a", "b", "c"]);
  const children = await sql`select input, parent_task_index from pgflow.runs
                             where parent_run_id = ${parent.run_id} order by parent_task_index`;
  assert.deepEqual(children.map((c) => c.input), [{ id: "a" }, { id: "b" }, { id: "c" }]);
  await completeTasks(
    sql,
    "enrich_v1",
    "profile",
    (i) => ({ name: (i as { id: string }).id.toUpperCase() }),
  );
  const [each] = await sql`select status, output from pgflow.step_states
                           where run_id = ${parent.run_id} and step_slug = 'each'`;
  assert.deepEqual([each.status, each.output], ["completed", [
    { profile: { name: "A" } },
    { profile: { name: "B" } },
    { profile: { name: "C" } },
  ]]);
  const doc = (await sql`select pgflow.get_run(${parent.run_id}) as doc`)[0].doc;
  const step = doc.steps.find((s: { step_slug: string }) => s.step_slug === "each");
  assert.equal(step.child_flow, "enrich_v1");
  assert.deepEqual(
    step.children.map((c: { task_index: number; status: string }) => [c.task_index, c.status]),
    [
      [0, "completed"],
      [1, "completed"],
      [2, "completed"],
    ],
  );
  const childDoc = (await sql`select pgflow.get_run(${step.children[1].run_id}) as doc`)[0].doc;
  assert.deepEqual(childDoc.parent, { run_id: parent.run_id, step_slug: "each", task_index: 1 });
});

db.test("a failed child fails its parent; a resume reuses the completed children and starts the rest", async ({ sql }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": []}')`;
  const ids = Array.from({ length: 10 }, (_, i) => `c${i}`);
  await completeTasks(sql, "onboard_all_v1", "ids", () => ids);
  await failTasks(
    sql,
    "enrich_v1",
    "profile",
    (i) => ["c3", "c7"].includes((i as { id: string }).id),
  );
  const [failed] =
    await sql`select status, error_message from pgflow.runs where run_id = ${parent.run_id}`;
  assert.equal(failed.status, "failed");
  assert.match(
    failed.error_message,
    /^\[CHILD_FLOW_FAILED\] child run [0-9a-f-]+ of flow enrich_v1 failed: boom$/,
  );
  const before = Number(
    (await sql`select count(*) as n from pgflow.runs where flow_slug = 'enrich_v1'`)[0].n,
  );

  const [resumed] = await sql`select * from pgflow.resume_run(${parent.run_id})`;
  const after = Number(
    (await sql`select count(*) as n from pgflow.runs where flow_slug = 'enrich_v1'`)[0].n,
  );
  assert.equal(after - before, 2, "only the two failed children start again");
  await completeTasks(sql, "enrich_v1", "profile", (i) => ({ name: (i as { id: string }).id }));
  await completeTasks(sql, "onboard_all_v1", "count", () => 10);
  const [done] = await sql`select status from pgflow.runs where run_id = ${resumed.run_id}`;
  assert.equal(done.status, "completed");
  const links = await sql`select t.child_run_id, c.parent_run_id from pgflow.step_tasks t
                          join pgflow.runs c on c.run_id = t.child_run_id
                          where t.run_id = ${resumed.run_id} and t.step_slug = 'each'`;
  assert.equal(links.length, 10, "every element of the resumed map names its child");
  assert.equal(links.filter((l) => l.parent_run_id === resumed.run_id).length, 2);
  const [each] =
    await sql`select output from pgflow.step_states where run_id = ${resumed.run_id} and step_slug = 'each'`;
  assert.deepEqual(each.output, ids.map((id) => ({ profile: { name: id } })));
});

db.test("cancelling a parent cancels its running children, and only those", async ({ sql }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": []}')`;
  await completeTasks(sql, "onboard_all_v1", "ids", () => ["a", "b", "c", "d"]);
  const worker = await registerWorker(sql, "accounts");
  const claims = (await readAndStart(sql, "accounts", worker, [["enrich_v1", "profile"]], 1000))
    .filter((r) => r.disposition === "claimed");
  const first = claims[0];
  await sql`select pgflow.complete_task(${first.run_id}, 'profile', 0, '{"name": "x"}', ${first.attempt})`;
  await sql`select pgflow.cancel_run(${parent.run_id}, 'operator')`;
  const children = await sql`select run_id, status, cancel_reason from pgflow.runs
                             where parent_run_id = ${parent.run_id} order by run_id`;
  assert.deepEqual(children.map((c) => c.status).sort(), [
    "cancelled",
    "cancelled",
    "cancelled",
    "completed",
  ]);
  for (const c of children.filter((c) => c.status === "cancelled")) {
    assert.equal(c.cancel_reason, `parent run ${parent.run_id} was cancelled`);
  }
  assert.deepEqual([...await queueMessages(sql, "accounts")], []);
});

db.test("a parent cancelled while a child finishes waits for it instead of deadlocking", async ({ sql, connect }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": []}')`;
  await completeTasks(sql, "onboard_all_v1", "ids", () => ["a", "b"]);
  const worker = await registerWorker(sql, "accounts");
  const [first] = (await readAndStart(sql, "accounts", worker, [["enrich_v1", "profile"]], 1000))
    .filter((r) => r.disposition === "claimed");
  const finisher = connect();
  const canceller = connect();
  let cancelled: Promise<unknown> | undefined;
  await finisher.begin(async (tx) => {
    // The child's finish has its run's lock (complete_tasks takes it first) ...
    await tx`select 1 from pgflow.runs where run_id = ${first.run_id} for update`;
    // ... when an operator cancels the parent on another connection.
    cancelled = canceller`select pgflow.cancel_run(${parent.run_id}, 'operator')`.execute();
    await waitFor(
      async () =>
        (await sql`select 1 from pg_stat_activity
                   where wait_event_type = 'Lock' and query like '%cancel_run%'`).length > 0,
      { what: "the cancel to wait on a lock" },
    );
    // The finish goes on to the parent (the trigger completes its task): with the cancel holding
    // the parent and waiting for this child, one of the two was ended with 40P01.
    await tx`select pgflow.complete_task(${first.run_id}, 'profile', 0, '{"name": "a"}', ${first.attempt})`;
  });
  await cancelled;
  const children = await sql`select status from pgflow.runs
                             where parent_run_id = ${parent.run_id} order by run_id`;
  assert.deepEqual(children.map((c) => c.status).sort(), ["cancelled", "completed"]);
  const [run] = await sql`select status from pgflow.runs where run_id = ${parent.run_id}`;
  assert.equal(run.status, "cancelled");
});

db.test("whenExhausted: 'skip' skips the step on a child's failure and cancels its siblings", async ({ sql }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_skip_v1', '["a", "b", "c"]')`;
  const worker = await registerWorker(sql, "accounts");
  const claims = (await readAndStart(sql, "accounts", worker, [["enrich_v1", "profile"]], 1))
    .filter((r) => r.disposition === "claimed");
  await sql`select pgflow.fail_task(${claims[0].run_id}, 'profile', 0, 'boom', ${
    claims[0].attempt
  })`;
  const [run] = await sql`select status from pgflow.runs where run_id = ${parent.run_id}`;
  assert.equal(run.status, "completed");
  const statuses = await sql`select status from pgflow.runs where parent_run_id = ${parent.run_id}`;
  assert.deepEqual(statuses.map((s) => s.status).sort(), ["cancelled", "cancelled", "failed"]);
});

db.test("deleting a flow another flow runs as a child is refused, naming the step", async ({ sql }) => {
  await compileAll(sql);
  await assert.rejects(
    sql`select pgflow.delete_flow_and_data('enrich_v1')`,
    /flow enrich_v1 is run as a child by step each of flow onboard_all_v1 \(child flow enrich_v1\); it was not deleted/,
  );
  for (const user of ["onboard_all_v1", "onboard_skip_v1", "onboard_v1"]) {
    await sql`select pgflow.delete_flow_and_data(${user})`;
  }
  await sql`select pgflow.delete_flow_and_data('enrich_v1')`;
});

db.test("the compiled shape carries the child: the same definition verifies, another is a mismatch", async ({ sql }) => {
  await compileAll(sql);
  const again = await compileFlow(sql, routeFlow(onboard, { queues: allOn(onboard) }));
  assert.equal(again.status, "verified", again.differences.join("; "));
  const other = new Flow<{ customer: { id: string; plan: string } }>({ slug: "onboard_v1" })
    .subflow({ slug: "enriched", flow: enrich, input: (input) => ({ id: input.customer.plan }) })
    .step({ slug: "greet", dependsOn: ["enriched"] }, (deps) => deps.enriched.profile.name);
  const changed = await compileFlow(sql, routeFlow(other, { queues: allOn(other) }));
  assert.equal(changed.status, "mismatch");
  assert.match(changed.differences.join("\n"), /step 0: child/);
});

db.test("children completing at once on several connections complete their parent's map once", async ({ sql, connect }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": []}')`;
  const ids = Array.from({ length: 40 }, (_, i) => `r${i}`);
  await completeTasks(sql, "onboard_all_v1", "ids", () => ids);
  const worker = await registerWorker(sql, "accounts");
  // 40 tasks for a queue other flows share, sent in one transaction: past the first 32 they take
  // turns (docs/flow-control.md, fairness), each claim releasing as many as it took, so a plain
  // PGMQ read sees them over two reads.
  const claims: Awaited<ReturnType<typeof readAndStart>> = [];
  for (let read = 0; read < 5 && claims.length < 40; read++) {
    claims.push(
      ...(await readAndStart(sql, "accounts", worker, [["enrich_v1", "profile"]], 1000))
        .filter((r) => r.disposition === "claimed"),
    );
  }
  assert.equal(claims.length, 40);
  // Eight connections, five completions each, all at once: each child's finish takes the parent's
  // lock after its own, so they queue on the parent instead of losing or double-counting a child.
  const reserved = Array.from({ length: 8 }, () => connect());
  try {
    await Promise.all(reserved.map((conn, c) =>
      (async () => {
        for (const r of claims.filter((_, i) => i % 8 === c)) {
          await conn`select pgflow.complete_task(${r.run_id}, 'profile', 0, ${
            sql.json({ name: (r.input as { id: string }).id } as never)
          }, ${r.attempt})`;
        }
      })()
    ));
  } finally {
    await Promise.all(reserved.map((conn) => conn.end()));
  }
  const [each] = await sql`select status, remaining_tasks, output from pgflow.step_states
                           where run_id = ${parent.run_id} and step_slug = 'each'`;
  assert.deepEqual([each.status, each.remaining_tasks], ["completed", 0]);
  assert.deepEqual(each.output, ids.map((id) => ({ profile: { name: id } })));
  const [{ n }] = await sql`select count(*)::int as n from pgflow.step_tasks
                            where run_id = ${parent.run_id} and step_slug = 'count'`;
  assert.equal(n, 1, "the dependent step started once");
});

db.test("runs show, the client and the dashboard link a parent and its children both ways", async ({ sql }) => {
  await compileAll(sql);
  const [parent] = await sql`select * from pgflow.start_flow('onboard_all_v1', '{"ids": []}')`;
  await completeTasks(sql, "onboard_all_v1", "ids", () => ["a", "b"]);
  const [kid] = await sql`select run_id from pgflow.runs where parent_run_id = ${parent.run_id}
                          and parent_task_index = 1`;
  const parentText = (await sql`select pgflow.get_run_text(${parent.run_id}) as t`)[0].t;
  const childText = (await sql`select pgflow.get_run_text(${kid.run_id}) as t`)[0].t;
  const parentState = toRunState(parentText)!;
  const childState = toRunState(childText)!;
  assert.deepEqual(childState.parent, { runId: parent.run_id, stepSlug: "each", taskIndex: 1 });
  const each = parentState.steps.find((s) => s.stepSlug === "each")!;
  assert.equal(each.childFlow, "enrich_v1");
  assert.deepEqual(each.children[1], { taskIndex: 1, runId: kid.run_id, status: "started" });
  const shown = formatRun(parentState).join("\n");
  assert.match(shown, /children of each \(flow enrich_v1\): 2 started/);
  assert.ok(shown.includes(`[1] ${kid.run_id} started`));
  assert.match(
    formatRun(childState).join("\n"),
    new RegExp(`parent +${parent.run_id} \\(step each \\[1\\]\\)`),
  );

  const page = await readOnly(sql, (tx) => readRun(tx, parent.run_id));
  assert.equal(page?.links.childCount, 2);
  assert.deepEqual(page?.links.children[1], {
    stepSlug: "each",
    taskIndex: 1,
    runId: kid.run_id,
    status: "started",
  });
  const childPage = await readOnly(sql, (tx) => readRun(tx, kid.run_id));
  assert.deepEqual(childPage?.links.parent, {
    runId: parent.run_id,
    stepSlug: "each",
    taskIndex: 1,
  });
});
