/** Map steps: fan-out per element, aggregation in index order, empty maps, type violations, scale. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function completeAll(
  sql: Sql,
  queue: string,
  flow: string,
  step: string,
  fn: (input: unknown) => unknown,
) {
  const worker = await registerWorker(sql, queue);
  const rows = (await readAndStart(sql, queue, worker, [[flow, step]], 1000)).filter((r) =>
    r.disposition === "claimed"
  );
  // Complete in reverse order: aggregation must follow the index, not the completion order.
  for (const r of [...rows].reverse()) {
    await sql`select pgflow.complete_task(${r.run_id}, ${step}, ${r.task_index}, ${
      sql.json(fn(r.input) as never)
    }, ${r.attempt})`;
  }
  return rows;
}

db.test("a root map runs one task per element and aggregates outputs in index order", async ({ sql }) => {
  await defineFlow(sql, "root_map", [
    { slug: "double", type: "map", queue: "map_shared" },
    { slug: "sum", deps: ["double"], queue: "map_other" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('root_map', '[3, 1, 2, 0]')`;
  const rows = await completeAll(sql, "map_shared", "root_map", "double", (n) => (n as number) * 2);
  assert.deepEqual(rows.map((r) => [r.task_index, r.input]).sort(), [[0, 3], [1, 1], [2, 2], [
    3,
    0,
  ]]);
  const [state] =
    await sql`select output from pgflow.step_states where run_id = ${run.run_id} and step_slug = 'double'`;
  assert.deepEqual(state.output, [6, 2, 4, 0]);
  const worker = await registerWorker(sql, "map_other");
  const [sum] = await readAndStart(sql, "map_other", worker, [["root_map", "sum"]]);
  assert.deepEqual(sum.input, { double: [6, 2, 4, 0] });
});

db.test("a dependent map over an empty array completes with no tasks and releases dependents", async ({ sql }) => {
  await defineFlow(sql, "empty_map", [
    { slug: "list", queue: "map_shared" },
    { slug: "each", deps: ["list"], type: "map", queue: "map_shared" },
    { slug: "after", deps: ["each"], queue: "map_other" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('empty_map', '{}')`;
  await completeAll(sql, "map_shared", "empty_map", "list", () => []);
  const [each] =
    await sql`select status, output, initial_tasks from pgflow.step_states where run_id = ${run.run_id} and step_slug = 'each'`;
  assert.deepEqual([each.status, each.output, each.initial_tasks], ["completed", [], 0]);
  const worker = await registerWorker(sql, "map_other");
  const [after] = (await readAndStart(sql, "map_other", worker, [["empty_map", "after"]])).filter((
    r,
  ) => r.run_id === run.run_id);
  assert.deepEqual(after.input, { each: [] });
});

db.test("a non-array feeding a map fails the run with a clear error", async ({ sql }) => {
  await defineFlow(sql, "bad_root_map", [{ slug: "m", type: "map", queue: "map_shared" }], {
    mode: "routed",
  });
  const [root] = await sql`select * from pgflow.start_flow('bad_root_map', '{"not": "an array"}')`;
  assert.equal(root.status, "failed");
  assert.equal(
    root.error_message,
    "[TYPE_VIOLATION] map step m needs an array to map over, got object",
  );

  await defineFlow(sql, "bad_dep_map", [
    { slug: "src", queue: "map_shared" },
    { slug: "m", deps: ["src"], type: "map", queue: "map_other" },
  ], { mode: "routed" });
  const [run] = await sql`select * from pgflow.start_flow('bad_dep_map', '{}')`;
  await completeAll(sql, "map_shared", "bad_dep_map", "src", () => "a string");
  const [failed] =
    await sql`select status, error_message from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([failed.status, failed.error_message], [
    "failed",
    "[TYPE_VIOLATION] map step m needs an array to map over, got string",
  ]);
});

db.test("a 10,000-element map on a shared queue sends a window, takes turns and completes", async ({ sql }) => {
  await defineFlow(sql, "big_map", [{ slug: "each", type: "map", queue: "big_shared" }], {
    mode: "routed",
  });
  await defineFlow(sql, "neighbour", [{ slug: "a", queue: "big_shared" }], { mode: "routed" });
  const [other] = await sql`select * from pgflow.start_flow('neighbour', '{}')`;
  const items = Array.from({ length: 10_000 }, (_, i) => i);
  const [run] = await sql`select * from pgflow.start_flow('big_map', ${sql.json(items)})`;
  // Another flow routes to the queue: past the first window the map's tasks wait for their turn
  // (docs/flow-control.md, fairness).
  const [{ w }] = await sql<{ w: number }[]>`select pgflow._fair_window() as w`;
  const [{ n, distinct_ids, waiting }] = await sql`
    select count(*)::int as n, count(distinct message_id)::int as distinct_ids,
           count(*) filter (where status = 'waiting')::int as waiting
    from pgflow.step_tasks where run_id = ${run.run_id}`;
  assert.deepEqual([n, distinct_ids, waiting], [10_000, w, 10_000 - w]);
  assert.equal((await queueMessages(sql, "big_shared")).length, w + 1);

  // Claim and complete every task server-side, as a worker would, in reads of 500: a read deeper
  // than the window makes room for its depth first.
  const worker = await registerWorker(sql, "big_shared");
  await sql.unsafe(`
    do $$
    declare
      r record;
      got integer;
    begin
      loop
        got := 0;
        for r in select * from pgflow.read_and_claim('big_shared', '${worker}', 30, 500, 0, 50, '[["big_map", "each"]]')
                 where disposition = 'claimed' loop
          got := got + 1;
          perform pgflow.complete_task(r.run_id, r.step_slug, r.task_index, to_jsonb((r.input::text)::int + 1), r.attempt);
        end loop;
        exit when got = 0;
      end loop;
    end
    $$;`);
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.equal(done.status, "completed");
  assert.deepEqual(done.output.each, items.map((i) => i + 1));
  assert.equal((await archivedMessages(sql, "big_shared")).length, 10_000);
  const left = await queueMessages(sql, "big_shared");
  const [otherTask] =
    await sql`select message_id::text as id from pgflow.step_tasks where run_id = ${other.run_id}`;
  assert.deepEqual(
    left.map((m) => m.msg_id),
    [otherTask.id],
    "the neighbour's message is still there, unclaimed",
  );
});
