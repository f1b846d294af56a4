/** A flow whose steps sit on three different queues runs to completion through SQL calls alone. */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("three steps on three queues complete end to end", async ({ sql }) => {
  await defineFlow(sql, "triage_v1", [
    { slug: "classify", queue: "e2e_classify" },
    { slug: "enrich", deps: ["classify"], queue: "e2e_enrich" },
    { slug: "deliver", deps: ["enrich"], queue: "e2e_deliver" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('triage_v1', '{"threadId": "t1"}')`;
  assert.equal(run.status, "started");

  // Handler inputs are whatever JSON the previous step produced.
  // deno-lint-ignore no-explicit-any
  const steps: [string, string, (input: any) => unknown][] = [
    ["e2e_classify", "classify", (input) => ({ label: `urgent:${input.threadId}` })],
    ["e2e_enrich", "enrich", (input) => ({ ...input.classify, score: 0 })],
    ["e2e_deliver", "deliver", (input) => input.enrich.score === 0 ? false : true],
  ];
  for (const [queue, step, handler] of steps) {
    // The next step's message is on its own queue and nowhere else.
    for (const [other] of steps.filter(([q]) => q !== queue)) {
      assert.equal(
        (await queueMessages(sql, other)).length,
        0,
        `${other} is empty while ${step} runs`,
      );
    }
    const worker = await registerWorker(sql, queue);
    const rows = await readAndStart(sql, queue, worker, [["triage_v1", step]]);
    assert.equal(rows.length, 1);
    assert.equal(rows[0].disposition, "claimed");
    assert.equal(rows[0].step_slug, step);
    await sql`select pgflow.complete_task(${rows[0].run_id}, ${step}, 0, ${
      sql.json(handler(rows[0].input) as never)
    }, ${rows[0].attempt})`;
    assert.equal((await queueMessages(sql, queue)).length, 0, `${step}'s message left ${queue}`);
    assert.equal(
      (await archivedMessages(sql, queue)).length,
      1,
      `${step}'s message archived in ${queue}`,
    );
  }
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output, { deliver: false });
});
