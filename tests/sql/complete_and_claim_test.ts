/**
 * pgflow.complete_and_claim: a batch's completions and the next read in one transaction. It must
 * complete exactly as complete_tasks does, read and claim exactly as read_and_claim does, and
 * change nothing at all when any part fails.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Row {
  msg_id: string;
  read_ct: number;
  disposition: string;
  run_id: string | null;
  step_slug: string | null;
  task_index: number | null;
  attempt: number | null;
  input: unknown;
  message: unknown;
}

async function register(sql: Sql, queue: string, pairs: [string, string][]): Promise<string> {
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, ${queue}, 'test_fn', ${
    JSON.stringify(pairs)
  }::text::jsonb)`;
  return worker;
}

function completeAndClaim(
  sql: Sql,
  queue: string,
  worker: string,
  done: { run_id: string | null; step_slug: string | null; task_index: number | null }[],
  outputs: string[],
  attempts: (number | null)[],
  qty = 10,
): Promise<Row[]> {
  return sql<Row[]>`
    select msg_id::text, read_ct, disposition, run_id, step_slug, task_index, attempt, input, message
    from pgflow.complete_and_claim(
      ${done.map((d) => d.run_id!)}::uuid[], ${done.map((d) => d.step_slug!)}::text[],
      ${done.map((d) => d.task_index!)}::integer[], ${outputs}::text[]::jsonb[],
      ${attempts}::integer[], ${queue}, ${worker}::uuid, 30, ${qty}::integer)`;
}

db.test("completes a batch and claims the next in one call, as complete_tasks then read_and_claim", async ({ sql }) => {
  await defineFlow(sql, "cc_one", [{ slug: "a", queue: "cc_one_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('cc_one', jsonb_build_object('i', i))) from generate_series(1, 5) i`;
  const worker = await register(sql, "cc_one_q", [["cc_one", "a"]]);
  // Nothing to complete yet: a plain read.
  const first = await completeAndClaim(sql, "cc_one_q", worker, [], [], [], 3);
  assert.deepEqual(first.map((r) => r.disposition), ["claimed", "claimed", "claimed"]);
  assert.ok(first.every((r) => r.message !== null && r.attempt === 1));

  // Completes the three (one of them twice, the second time late) and claims the other two.
  const second = await completeAndClaim(
    sql,
    "cc_one_q",
    worker,
    [...first, first[0]],
    [...first.map((r) => JSON.stringify((r.input as { i: number }).i * 10)), '"late"'],
    [...first.map((r) => r.attempt), first[0].attempt],
  );
  assert.equal(second.length, 2);
  assert.ok(second.every((r) => r.disposition === "claimed"));
  const runs = await sql`select status, output, input from pgflow.runs where flow_slug = 'cc_one'`;
  assert.equal(runs.filter((r) => r.status === "completed").length, 3);
  assert.equal(runs.filter((r) => r.status === "started").length, 2);
  for (const r of runs.filter((r) => r.status === "completed")) {
    assert.deepEqual(r.output, { a: r.input.i * 10 });
  }
  // The completed tasks' messages are archived, the claimed ones hidden.
  const live = await queueMessages(sql, "cc_one_q");
  assert.deepEqual(live.map((m) => m.msg_id).sort(), second.map((r) => r.msg_id).sort());
});

db.test("a step completed in the call hands its dependent on the same queue to the same call's read", async ({ sql }) => {
  await defineFlow(sql, "cc_chain", [
    { slug: "a", queue: "cc_chain_q" },
    { slug: "b", deps: ["a"], queue: "cc_chain_q" },
  ], { mode: "routed" });
  const [run] = await sql`select run_id from pgflow.start_flow('cc_chain', '{"x": 1}')`;
  const worker = await register(sql, "cc_chain_q", [["cc_chain", "a"], ["cc_chain", "b"]]);
  const [a] = await completeAndClaim(sql, "cc_chain_q", worker, [], [], []);
  assert.equal(a.step_slug, "a");
  const [b, ...rest] = await completeAndClaim(sql, "cc_chain_q", worker, [a], ['"A"'], [a.attempt]);
  assert.equal(rest.length, 0);
  assert.deepEqual([b.disposition, b.run_id, b.step_slug, b.input], [
    "claimed",
    run.run_id,
    "b",
    { a: "A" },
  ]);
});

db.test("a call that fails changes nothing: no completion, no read, no claim", async ({ sql }) => {
  await defineFlow(sql, "cc_fail", [{ slug: "a", queue: "cc_fail_q" }], { mode: "routed" });
  await sql`select count(pgflow.start_flow('cc_fail', '{}')) from generate_series(1, 3)`;
  const worker = await register(sql, "cc_fail_q", [["cc_fail", "a"]]);
  const [done] = await completeAndClaim(sql, "cc_fail_q", worker, [], [], [], 1);
  const before = await queueMessages(sql, "cc_fail_q");

  // A completion without its attempt is refused, with complete_tasks' own error.
  await assert.rejects(
    completeAndClaim(sql, "cc_fail_q", worker, [done], ["1"], [null]),
    /complete_task: attempt is required/,
  );
  // An unregistered worker (supported => NULL) is refused after the completions ran: they roll back.
  await assert.rejects(
    completeAndClaim(sql, "cc_fail_q", crypto.randomUUID(), [done], ["1"], [done.attempt]),
    (error: { code?: string }) => error.code === "PFW01",
  );
  const [task] = await sql`select status, attempts_count from pgflow.step_tasks
                           where run_id = ${done.run_id}::uuid`;
  assert.deepEqual([task.status, task.attempts_count], ["started", 1]);
  const after = await queueMessages(sql, "cc_fail_q");
  assert.deepEqual(
    after.map((m) => [m.msg_id, m.read_ct]),
    before.map((m) => [m.msg_id, m.read_ct]),
    "no message was read or archived",
  );
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.step_tasks
               where flow_slug = 'cc_fail' and status = 'started'`)[0].n,
    1,
  );
});
