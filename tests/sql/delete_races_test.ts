/**
 * delete_flow_and_data racing complete_task (issue 14, items 2 and 3): the delete leaves none of
 * the flow's messages behind, and the two never deadlock; one waits for the other and neither
 * fails. Each race runs on separate connections whose statements are really in flight at once.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

/** Waits until a backend whose query contains `text` waits for a lock. */
async function waitForLockWait(sql: Sql, text: string, what: string): Promise<void> {
  await waitFor(async () =>
    (await sql`select count(*)::int as n from pg_stat_activity
               where wait_event_type = 'Lock' and query like ${`%${text}%`}
                 and pid <> pg_backend_pid()`)[0].n >= 1, { what });
}

/** A two-step routed flow on a shared queue with one run whose first task is claimed. */
async function claimedRun(sql: Sql, flow: string, queue: string) {
  await defineFlow(sql, flow, [
    { slug: "a", queue },
    { slug: "b", deps: ["a"], queue },
  ], { mode: "routed" });
  // Another flow's message on the same queue must survive the delete.
  await defineFlow(sql, `${flow}_other`, [{ slug: "a", queue }], { mode: "routed" });
  await sql`select pgflow.start_flow(${`${flow}_other`}, '{}')`;
  const [run] = await sql`select * from pgflow.start_flow(${flow}, '{}')`;
  const worker = await registerWorker(sql, queue);
  const [claimed] = (await readAndStart(sql, queue, worker, [[flow, "a"]])).filter((r) =>
    r.disposition === "claimed"
  );
  assert.equal(claimed.run_id, run.run_id);
  return { runId: run.run_id as string, attempt: claimed.attempt! };
}

async function flowMessages(sql: Sql, queue: string, flow: string) {
  return (await queueMessages(sql, queue)).filter((m) =>
    (m.message as { flow_slug?: string }).flow_slug === flow
  );
}

db.test("a delete waiting on an open completion removes the message that completion sent", async ({ sql, connect }) => {
  const { runId, attempt } = await claimedRun(sql, "del_inflight", "del_inflight_q");
  const completer = connect();
  const deleter = connect();
  let deleting!: Promise<unknown>;
  await completer.begin(async (tx) => {
    // The completion sends b's message inside this still-open transaction.
    await tx`select pgflow.complete_task(${runId}, 'a', 0, '1', ${attempt})`;
    deleting = deleter`select pgflow.delete_flow_and_data('del_inflight')`.execute();
    await waitForLockWait(sql, "delete_flow_and_data", "the delete to wait for the completion");
  });
  await deleting;
  assert.deepEqual(
    await flowMessages(sql, "del_inflight_q", "del_inflight"),
    [],
    "no message of the deleted flow is left on the shared queue",
  );
  assert.equal((await flowMessages(sql, "del_inflight_q", "del_inflight_other")).length, 1);
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.step_tasks where flow_slug = 'del_inflight'`)[
      0
    ]
      .n,
    0,
  );
});

db.test("a delete and a completion that meet on the same message do not deadlock", async ({ sql, connect }) => {
  const { runId, attempt } = await claimedRun(sql, "del_dl", "del_dl_q");
  const [{ id }] =
    await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${runId} and step_slug = 'a'`;
  const holder = connect();
  const deleter = connect();
  const completer = connect();
  let deleting!: Promise<unknown>;
  let completing!: Promise<unknown>;
  // The holder keeps a's message row locked, so both sessions queue up behind it: first the
  // delete, then the completion (which by then holds the run and a's task row). Released, the
  // delete gets the message first; locking messages before the run, it would then wait for a's
  // task row while the completion waits for the message: a deadlock.
  await holder.begin(async (tx) => {
    await tx`select msg_id from pgmq.q_del_dl_q where msg_id = ${id}::bigint for update`;
    deleting = deleter`select pgflow.delete_flow_and_data('del_dl')`.execute();
    await waitForLockWait(sql, "delete_flow_and_data", "the delete to queue up");
    completing = completer`select * from pgflow.complete_task(${runId}, 'a', 0, '1', ${attempt})`
      .execute();
    await waitForLockWait(sql, "complete_task", "the completion to queue up");
  });
  const outcomes = await Promise.allSettled([deleting, completing]);
  assert.deepEqual(
    outcomes.map((o) => o.status === "rejected" ? String(o.reason) : "ok"),
    ["ok", "ok"],
    "neither the delete nor the completion fails",
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'del_dl'`)[0].n,
    0,
  );
  assert.deepEqual(await flowMessages(sql, "del_dl_q", "del_dl"), []);
  assert.equal((await flowMessages(sql, "del_dl_q", "del_dl_other")).length, 1);
});

db.test("deletes racing a stream of completions under load: no failure, no stray message", async ({ sql, connect }) => {
  const rounds = 4;
  for (let round = 0; round < rounds; round++) {
    const flow = `del_load_${round}`;
    const queue = `del_load_q`;
    await defineFlow(sql, flow, [
      { slug: "a", queue },
      { slug: "b", deps: ["a"], queue },
      { slug: "c", deps: ["b"], queue },
    ], { mode: "routed" });
    for (let i = 0; i < 30; i++) await sql`select pgflow.start_flow(${flow}, '{}')`;
    const worker = await registerWorker(sql, queue);
    const claimed = (await readAndStart(sql, queue, worker, [[flow, "a"]], 30)).filter((r) =>
      r.disposition === "claimed"
    );
    const completers = [connect(), connect(), connect()];
    const deleter = connect();
    const completions = completers.map((c, k) =>
      (async () => {
        for (const r of claimed.filter((_, i) => i % completers.length === k)) {
          await c`select * from pgflow.complete_task(${r.run_id}, 'a', 0, '1', ${r.attempt})`;
        }
      })()
    );
    await new Promise((r) => setTimeout(r, 5 * round));
    const outcomes = await Promise.allSettled([
      deleter`select pgflow.delete_flow_and_data(${flow})`.execute(),
      ...completions,
    ]);
    assert.deepEqual(
      outcomes.filter((o) => o.status === "rejected").map((o) => String(o.reason)),
      [],
      `round ${round}: nothing fails`,
    );
    assert.deepEqual(await flowMessages(sql, queue, flow), [], `round ${round}: no stray message`);
    for (const c of [...completers, deleter]) await c.end();
  }
});
