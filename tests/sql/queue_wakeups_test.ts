/**
 * Work sent to a queue is announced on channel `pgflow_queue:<queue>` in the sending transaction:
 * at commit (never before, never after a rollback), once per queue and transaction, for every
 * queue a send reaches (the next step's too), and never for a step held back by its startDelay.
 * read_and_claim with max_poll_seconds 0 reads once without waiting.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import {
  allNotified,
  defineFlow,
  readAndStart,
  registerWorker,
  waitForNotifications,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("sends are announced at commit, once per queue and transaction", async ({ sql, connect }) => {
  await defineFlow(sql, "wk_chain", [
    { slug: "a", queue: "wk_q1" },
    { slug: "b", deps: ["a"], queue: "wk_q2" },
  ], { mode: "routed" });
  await defineFlow(sql, "wk_later", [{ slug: "a", queue: "wk_q3", startDelay: 30 }], {
    mode: "routed",
  });
  const listener = connect();
  const heard: string[] = [];
  for (const q of ["wk_q1", "wk_q2", "wk_q3"]) {
    await listener.listen(`pgflow_queue:${q}`, (payload) => heard.push(`${q}:${payload}`));
  }
  await waitForNotifications(listener, ["wk_q1", "wk_q2", "wk_q3"].map((q) => `pgflow_queue:${q}`));

  await sql.begin(async (tx) => {
    await tx`select pgflow.start_flow('wk_chain', '{}')`;
    await tx`select pgflow.start_flow('wk_chain', '{}')`;
    await allNotified(listener, sql);
    assert.deepEqual(heard, [], "nothing is announced before the commit");
  });
  await allNotified(listener, sql);
  assert.deepEqual(heard, ["wk_q1:"], "one empty notification for the transaction's two sends");

  await assert.rejects(
    sql.begin(async (tx) => {
      await tx`select pgflow.start_flow('wk_chain', '{}')`;
      throw new Error("roll back");
    }),
    /roll back/,
  );
  await sql`select pgflow.start_flow('wk_later', '{}')`;
  await allNotified(listener, sql);
  assert.deepEqual(heard, ["wk_q1:"], "neither a rolled-back nor a delayed send is announced");

  // Completing a sends b to its own queue: announced there.
  const worker = await registerWorker(sql, "wk_q1");
  const [task] = await readAndStart(sql, "wk_q1", worker, [["wk_chain", "a"]]);
  await sql`select pgflow.complete_task(${task.run_id}, 'a', 0, '1', ${task.attempt})`;
  await allNotified(listener, sql);
  assert.deepEqual(heard, ["wk_q1:", "wk_q2:"]);
});

db.test("read_and_claim with max_poll_seconds 0 reads what is there, and returns at once when empty", async ({ sql }) => {
  await defineFlow(sql, "wk_now", [{ slug: "a", queue: "wk_now_q" }], { mode: "routed" });
  const worker = await registerWorker(sql, "wk_now_q");
  // Timed by the server, within the one statement: a busy machine delays the client and the
  // network far more than a read that does not wait.
  // (LATERAL: the read runs after t0 is taken; the outer clock is read after the read.)
  const [empty] = await sql`
    select r.n, extract(epoch from clock_timestamp() - a.t0) * 1000 as ms
    from (select clock_timestamp() as t0) a
    cross join lateral (
      select count(*)::int as n, a.t0 from pgflow.read_and_claim('wk_now_q', ${worker}::uuid, 5,
        10, 0, 50, '[["wk_now","a"]]'::jsonb)) r`;
  assert.equal(empty.n, 0);
  assert.ok(empty.ms < 1000, `an empty read does not wait (it took ${empty.ms} ms)`);
  await sql`select pgflow.start_flow('wk_now', '{}')`;
  const rows = await sql`select disposition from pgflow.read_and_claim('wk_now_q', ${worker}::uuid,
    5, 10, 0, 50, '[["wk_now","a"]]'::jsonb)`;
  assert.deepEqual(rows.map((r) => r.disposition), ["claimed"]);
});
