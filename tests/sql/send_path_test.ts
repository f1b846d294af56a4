/**
 * A one-task send (a plain root step, a chain's next step) goes through PGMQ's
 * send(queue, msg, headers, timestamptz) where PGMQ has it: the message must be the one the
 * integer form sends (the same body, no headers, visible after exactly the step's startDelay),
 * and the call must really be the direct one (Postgres's function statistics count no call of the
 * integer form's wrapper). A batched send (several tasks at once) does the same through
 * send_batch(queue, msgs, headers, timestamptz).
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

db.test("a batched send carries the bodies, no headers and the step's delay, through the direct send_batch", async ({ sql }) => {
  await defineFlow(sql, "batch_now", [{ slug: "a" }, { slug: "b" }]);
  await defineFlow(sql, "batch_later", [{ slug: "a", startDelay: 30 }, {
    slug: "b",
    startDelay: 30,
  }]);
  const { calls, now, later } = await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    const [{ run_id: now }] =
      await tx`select run_id from pgflow.start_flow('batch_now', '{}'::jsonb)`;
    const [{ run_id: later }] =
      await tx`select run_id from pgflow.start_flow('batch_later', '{}'::jsonb)`;
    const [calls] = await tx`
      select coalesce(pg_stat_get_xact_function_calls(
               'pgmq.send_batch(text,jsonb[],jsonb[],integer)'::regprocedure), 0)::int as wrapper,
             coalesce(pg_stat_get_xact_function_calls(
               'pgmq.send_batch(text,jsonb[],jsonb[],timestamp with time zone)'::regprocedure), 0)::int
               as direct`;
    return { calls, now, later };
  });
  assert.deepEqual({ ...calls }, { wrapper: 0, direct: 2 }, JSON.stringify(calls));
  for (
    const [queue, runId, delay] of [["batch_now", now, 0], ["batch_later", later, 30]] as const
  ) {
    const rows = await sql.unsafe(
      `select msg_id, message, headers, extract(epoch from vt - enqueued_at)::float8 as delay
       from pgmq.q_${queue} order by msg_id`,
    );
    assert.deepEqual(
      rows.map((r) => r.message),
      ["a", "b"].map((step) => ({
        flow_slug: queue,
        run_id: runId,
        step_slug: step,
        task_index: 0,
      })),
    );
    const tasks = await sql`
      select step_slug, message_id from pgflow.step_tasks where run_id = ${runId} order by step_slug`;
    assert.deepEqual(
      tasks.map((t) => [t.step_slug, String(t.message_id)]),
      [["a", String(rows[0].msg_id)], ["b", String(rows[1].msg_id)]],
      "each task row holds its own message's id",
    );
    for (const row of rows) {
      assert.equal(row.headers, null);
      assert.ok(
        Math.abs(row.delay - delay) < 1,
        `${queue}: visible after ${delay} s, got ${row.delay}`,
      );
    }
  }
});

db.test(
  "on PGMQ before 1.5 (no timestamptz sends) one-task and batched sends use the integer forms",
  async ({ sql }) => {
    // PGMQ 1.4.4's shape: send(queue, msg, delay integer) and send_batch(queue, msgs, delay
    // integer) insert by themselves; neither headers nor timestamptz overloads exist.
    await sql.unsafe(`
      drop function pgmq.send(text, jsonb, jsonb, timestamp with time zone);
      drop function pgmq.send_batch(text, jsonb[], jsonb[], timestamp with time zone);
      create or replace function pgmq.send(queue_name text, msg jsonb, delay integer)
      returns setof bigint language plpgsql as $fn$
      begin
        return query execute format(
          'insert into pgmq.%I (vt, message) values (clock_timestamp() + make_interval(secs => $1), $2)
           returning msg_id', 'q_' || queue_name) using delay, msg;
      end $fn$;
      create or replace function pgmq.send_batch(queue_name text, msgs jsonb[], delay integer)
      returns setof bigint language plpgsql as $fn$
      begin
        return query execute format(
          'insert into pgmq.%I (vt, message)
           select clock_timestamp() + make_interval(secs => $1), m from unnest($2) with ordinality as b(m, i)
           order by i returning msg_id', 'q_' || queue_name) using delay, msgs;
      end $fn$;`);
    await defineFlow(sql, "old_one", [{ slug: "a", startDelay: 30 }]);
    await defineFlow(sql, "old_batch", [{ slug: "a" }, { slug: "b" }]);
    const [{ run_id: one }] =
      await sql`select run_id from pgflow.start_flow('old_one', '{}'::jsonb)`;
    const [{ run_id: batch }] =
      await sql`select run_id from pgflow.start_flow('old_batch', '{}'::jsonb)`;
    for (
      const [queue, runId, steps, delay] of [
        ["old_one", one, ["a"], 30],
        ["old_batch", batch, ["a", "b"], 0],
      ] as const
    ) {
      const rows = await sql.unsafe(
        `select q.message, extract(epoch from q.vt - q.enqueued_at)::float8 as delay, t.step_slug
         from pgmq.q_${queue} q join pgflow.step_tasks t on t.message_id = q.msg_id and t.run_id = $1
         order by q.msg_id`,
        [runId],
      );
      assert.deepEqual(
        rows.map((r) => [r.step_slug, r.message]),
        steps.map((s) => [s, { flow_slug: queue, run_id: runId, step_slug: s, task_index: 0 }]),
      );
      for (const row of rows) {
        assert.ok(
          Math.abs(row.delay - delay) < 1,
          `${queue}: visible after ${delay} s, got ${row.delay}`,
        );
      }
    }
  },
  { fresh: true },
);

db.test("a map larger than one send_batch goes out in slices, each task paired with its own message", async ({ sql }) => {
  await defineFlow(sql, "send_big_map", [{ slug: "m", type: "map" }]);
  const calls = await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    await tx`select pgflow.start_flow('send_big_map', (select jsonb_agg(i) from generate_series(0, 2499) i))`;
    const [row] = await tx`
      select coalesce(pg_stat_get_xact_function_calls(
               'pgmq.send_batch(text,jsonb[],jsonb[],timestamp with time zone)'::regprocedure), 0)::int
               as direct`;
    return row.direct;
  });
  assert.equal(calls, 3, "2,500 elements in slices of 1,000");
  const [pairs] = await sql`
    select count(*)::int as tasks,
           count(distinct t.message_id)::int as messages,
           count(*) filter (where (q.message ->> 'task_index')::int = t.task_index
                              and t.input = to_jsonb(t.task_index))::int as paired
    from pgflow.step_tasks t join pgmq.q_send_big_map q on q.msg_id = t.message_id
    where t.flow_slug = 'send_big_map'`;
  assert.deepEqual({ ...pairs }, { tasks: 2500, messages: 2500, paired: 2500 });
});
