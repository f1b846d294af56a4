/** Declaring shared queues: collisions, spellings, concurrent declaration, atomicity. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow } from "../../src/dsl/flow.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { withStepQueues } from "../../src/routing/with_step_queues.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

function oneStep(slug: string, queue: string) {
  return routeFlow(new Flow<{ n: number }>({ slug }).step({ slug: "work" }, (i) => i.n), {
    queues: { work: queue },
  });
}

async function state(sql: Sql) {
  return {
    flows: (await sql`select flow_slug from pgflow.flows order by 1`).map((r) => r.flow_slug),
    declared: (await sql`select queue_name from pgflow.shared_queues order by 1`).map((r) =>
      r.queue_name
    ),
    queues: (await sql`select queue_name from pgmq.list_queues() order by 1`).map((r) =>
      r.queue_name
    ),
  };
}

db.test("an external queue is refused by name", async ({ sql }) => {
  await sql`select pgmq.create('ext_jobs')`;
  const before = await state(sql);
  await assert.rejects(
    () => compileFlow(sql, oneStep("uses_ext", "ext_jobs")),
    /flow uses_ext: queue ext_jobs is an external queue \(not created by pgflow\), not a shared queue/,
  );
  assert.deepEqual(await state(sql), before);
});

db.test("a flow's default queue is refused, and a plain flow cannot take a shared queue's name", async ({ sql }) => {
  await compileFlow(
    sql,
    new Flow<{ n: number }>({ slug: "alerts" }).step({ slug: "a" }, (i) => i.n),
  );
  await assert.rejects(
    () => compileFlow(sql, oneStep("uses_alerts", "alerts")),
    /queue alerts is the default queue of flow alerts, not a shared queue/,
  );
  await compileFlow(sql, oneStep("owner", "reports"));
  await assert.rejects(
    () =>
      compileFlow(
        sql,
        new Flow<{ n: number }>({ slug: "reports" }).step({ slug: "a" }, (i) => i.n),
      ),
    (error: Error & { hint?: string }) => {
      assert.match(
        error.message,
        /flow reports: a plain flow polls the queue named after its slug, and reports is a shared queue declared with routeFlow\(\)/,
      );
      assert.match(
        String(error.hint),
        /another slug \(e\.g\. reports_v2\), or route its steps with routeFlow/,
      );
      return true;
    },
  );
  assert.deepEqual(
    (await state(sql)).flows.filter((f) => ["uses_alerts", "reports"].includes(f)),
    [],
  );
});

db.test("a private step queue can never be a shared queue", async ({ sql }) => {
  await compileFlow(
    sql,
    withStepQueues(new Flow<{ n: number }>({ slug: "priv" }).step({ slug: "a" }, (i) => i.n)),
  );
  const plan = { mode: "routed", queues: { work: "priv__a" } };
  const shape = {
    steps: [{
      slug: "work",
      index: 0,
      stepType: "single",
      dependencies: [],
      whenUnmet: "skip",
      whenExhausted: "fail",
      requiredInputPattern: { defined: false },
      forbiddenInputPattern: { defined: false },
    }],
  };
  await assert.rejects(
    () =>
      sql`select pgflow.ensure_flow_compiled('steal_priv', ${sql.json(shape)}, ${sql.json(plan)})`,
    /invalid shared queue name 'priv__a'/,
  );
  // The same collision through the lower-level definition functions is refused too.
  await sql`select pgflow.create_flow('steal_priv2', 3, 1, 60, 'routed')`;
  await assert.rejects(
    () => sql`select pgflow.add_step('steal_priv2', 'work', queue_name => 'priv__a')`,
    /invalid queue name 'priv__a'/,
  );
});

db.test("several spellings of one name are refused before anything changes", async ({ sql }) => {
  await sql`select pgmq.create('Dup_Spelling')`;
  await sql`select pgmq.create('dup_spelling')`;
  const before = await state(sql);
  await assert.rejects(
    () => compileFlow(sql, oneStep("uses_dup", "dup_spelling")),
    /queue dup_spelling is listed by PGMQ under several spellings \{Dup_Spelling,dup_spelling\}/,
  );
  assert.deepEqual(await state(sql), before);
  // One other spelling alone is still not pgflow's queue.
  await sql`select pgmq.create('Only_Upper')`;
  await assert.rejects(
    () => compileFlow(sql, oneStep("uses_upper", "only_upper")),
    /queue Only_Upper is an external queue/,
  );
});

db.test("two connections declaring the same new queue at once both succeed with one declaration", async ({ sql, connect }) => {
  for (let round = 0; round < 5; round++) {
    const queue = `race_decl_${round}`;
    const a = connect();
    const b = connect();
    const [ra, rb] = await Promise.all([
      compileFlow(a, oneStep(`race_a_${round}`, queue)),
      compileFlow(b, oneStep(`race_b_${round}`, queue)),
    ]);
    assert.deepEqual([ra.status, rb.status], ["compiled", "compiled"]);
    const [{ n }] =
      await sql`select count(*)::int as n from pgflow.shared_queues where queue_name = ${queue}`;
    const [{ m }] =
      await sql`select count(*)::int as m from pgmq.list_queues() where queue_name = ${queue}`;
    assert.deepEqual([n, m], [1, 1]);
    await a.end();
    await b.end();
  }
});

db.test("a refused compile leaves no declaration, route or queue behind", async ({ sql }) => {
  await sql`select pgmq.create('taken_ext')`;
  const flow = routeFlow(
    new Flow<{ n: number }>({ slug: "half_way" }).step({ slug: "a" }, (i) => i.n).step({
      slug: "b",
    }, (i) => i.n),
    { queues: { a: "fresh_shared", b: "taken_ext" } },
  );
  const before = await state(sql);
  await assert.rejects(() => compileFlow(sql, flow), /queue taken_ext is an external queue/);
  assert.deepEqual(await state(sql), before, "fresh_shared was not declared or created");
});
