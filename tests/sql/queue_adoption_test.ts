/**
 * Plain and step-mode flows never adopt an application's queue, and deleting a flow never drops a
 * queue pgflow did not create for it (issue 14, item 1).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { Flow } from "../../src/dsl/flow.ts";
import { withStepQueues } from "../../src/routing/with_step_queues.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow, queueMessages } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const plain = (slug: string) =>
  new Flow<{ n: number }>({ slug }).step({ slug: "work" }, (i) => i.n);

async function queues(sql: Sql): Promise<string[]> {
  return (await sql`select queue_name from pgmq.list_queues() order by 1`).map((r) => r.queue_name);
}

db.test("create_flow and add_step refuse an application's queue under any spelling, naming it", async ({ sql }) => {
  // The application's own queues, with its messages.
  for (const q of ["orders", "Billing", "reports__render"]) {
    await sql`select pgmq.create(${q})`;
    await sql`select pgmq.send(${q}, ${sql.json({ app: q })})`;
  }
  const before = await queues(sql);

  await assert.rejects(
    () => compileFlow(sql, plain("orders")),
    /flow orders: queue orders already exists and pgflow did not create it for this flow; it will not adopt it/,
  );
  await assert.rejects(
    () => compileFlow(sql, plain("billing")),
    /flow billing: queue Billing already exists and pgflow did not create it/,
  );
  await assert.rejects(
    () =>
      compileFlow(
        sql,
        withStepQueues(
          new Flow<{ n: number }>({ slug: "reports" }).step({ slug: "render" }, (i) => i.n),
        ),
      ),
    /flow reports: queue reports__render already exists and pgflow did not create it/,
  );
  // The lower-level definition functions refuse the same.
  await assert.rejects(
    () => sql`select pgflow.create_flow('Orders')`,
    /flow Orders: queue orders already exists/,
  );
  await sql`select pgflow.create_flow('reports', 3, 1, 60, 'step')`;
  await assert.rejects(
    () => sql`select pgflow.add_step('reports', 'render')`,
    /flow reports: queue reports__render already exists/,
  );
  await sql`select pgflow.delete_flow_and_data('reports')`;

  // Nothing was created, adopted or recorded; the application's messages are where they were.
  assert.deepEqual(await queues(sql), before, "no 'billing' next to 'Billing'");
  assert.equal((await sql`select count(*)::int as n from pgflow.flows`)[0].n, 0);
  assert.equal((await sql`select count(*)::int as n from pgflow.created_queues`)[0].n, 0);
  for (const q of ["orders", "Billing", "reports__render"]) {
    assert.deepEqual((await queueMessages(sql, q)).map((m) => m.message), [{ app: q }]);
  }
  await sql`select pgmq.send('Billing', '{"after": true}')`;
  await sql`select * from pgmq.metrics_all()`;
});

db.test("deletion drops only the queues pgflow created, and never one another spelling shares", async ({ sql }) => {
  await compileFlow(sql, plain("own_plain"));
  await compileFlow(
    sql,
    withStepQueues(
      new Flow<{ n: number }>({ slug: "own_steps" }).step({ slug: "a" }, (i) => i.n).step(
        { slug: "b" },
        (i) => i.n,
      ),
    ),
  );
  assert.deepEqual(
    (await sql`select queue_name, flow_slug from pgflow.created_queues order by 1`).map((r) =>
      `${r.queue_name}:${r.flow_slug}`
    ),
    ["own_plain:own_plain", "own_steps__a:own_steps", "own_steps__b:own_steps"],
  );

  // After pgflow created 'own_plain', an application creates 'Own_Plain': PGMQ keeps both names
  // over one table pair, so dropping 'own_plain' would leave 'Own_Plain' without tables.
  await sql`select pgmq.create('Own_Plain')`;
  const [{ send: appMsg }] = await sql`select * from pgmq.send('Own_Plain', '{"app": 1}')`;
  await sql`select pgflow.start_flow('own_plain', '{"n": 1}')`;
  await sql`select pgflow.delete_flow_and_data('own_plain')`;
  const left = await queues(sql);
  assert.ok(left.includes("Own_Plain") && left.includes("own_plain"), left.join(","));
  assert.deepEqual(
    (await queueMessages(sql, "own_plain")).map((m) => m.msg_id),
    [appMsg],
    "the flow's message is gone, the application's stays",
  );
  await sql`select pgmq.send('Own_Plain', '{"app": 2}')`;
  await sql`select * from pgmq.metrics_all()`;

  // Queues pgflow created and nobody else uses are dropped with the flow.
  await sql`select pgflow.start_flow('own_steps', '{"n": 1}')`;
  await sql`select pgflow.delete_flow_and_data('own_steps')`;
  const after = await queues(sql);
  assert.ok(!after.includes("own_steps__a") && !after.includes("own_steps__b"), after.join(","));
  assert.equal((await sql`select count(*)::int as n from pgflow.created_queues`)[0].n, 0);

  // A queue pgflow created and someone dropped is created again when the flow needs it.
  await compileFlow(sql, plain("own_again"));
  await sql`select pgmq.drop_queue('own_again')`;
  await sql`select pgflow.add_step('own_again', 'work')`; // identical: nothing to do
  await sql`select pgflow.add_step('own_again', 'more')`;
  assert.ok((await queues(sql)).includes("own_again"));
});
