/**
 * A one-task send (a plain root step, a chain's next step) goes through PGMQ's
 * send(queue, msg, headers, timestamptz) where PGMQ has it: the message must be the one the
 * integer form sends (the same body, no headers, visible after exactly the step's startDelay),
 * and the call must really be the direct one (Postgres's function statistics count no call of the
 * integer form's wrapper).
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("a one-task send carries the body, no headers and the step's delay", async ({ sql }) => {
  await defineFlow(sql, "send_now", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  await defineFlow(sql, "send_later", [{ slug: "a", startDelay: 30 }]);
  const [{ run_id: now }] =
    await sql`select run_id from pgflow.start_flow('send_now', '{}'::jsonb)`;
  const [{ run_id: later }] =
    await sql`select run_id from pgflow.start_flow('send_later', '{}'::jsonb)`;
  for (const [queue, runId, delay] of [["send_now", now, 0], ["send_later", later, 30]] as const) {
    const rows = await sql.unsafe(
      `select message, headers, extract(epoch from vt - enqueued_at)::float8 as delay
       from pgmq.q_${queue}`,
    );
    assert.equal(rows.length, 1, `one message on ${queue}`);
    assert.deepEqual(rows[0].message, {
      flow_slug: queue,
      run_id: runId,
      step_slug: "a",
      task_index: 0,
    });
    assert.equal(rows[0].headers, null);
    // enqueued_at and vt are two clock readings in one send: the delay within a second.
    assert.ok(
      Math.abs(rows[0].delay - delay) < 1,
      `${queue}: visible after ${delay} s, got ${rows[0].delay}`,
    );
  }
});

db.test("a one-task send calls PGMQ's timestamptz send directly, not its integer wrapper", async ({ sql }) => {
  await defineFlow(sql, "send_direct", [{ slug: "a" }]);
  // One transaction: pg_stat_get_xact_* counts this transaction's calls, never flushed ones.
  const calls = await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    await tx`select pgflow.start_flow('send_direct', '{}'::jsonb)`;
    const [row] = await tx`
      select coalesce(pg_stat_get_xact_function_calls(
               'pgmq.send(text,jsonb,jsonb,integer)'::regprocedure), 0)::int as wrapper,
             coalesce(pg_stat_get_xact_function_calls(
               'pgmq.send(text,jsonb,jsonb,timestamp with time zone)'::regprocedure), 0)::int as direct`;
    return row;
  });
  assert.deepEqual({ ...calls }, { wrapper: 0, direct: 1 }, JSON.stringify(calls));
});
