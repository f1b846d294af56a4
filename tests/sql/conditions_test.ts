/** if / ifNot with whenUnmet, whenExhausted, and skip cascades that span several queues. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import {
  archivedMessages,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Step {
  slug: string;
  deps?: string[];
  queue: string;
  type?: string;
  ifPattern?: unknown;
  ifNot?: unknown;
  whenUnmet?: string;
  whenExhausted?: string;
  maxAttempts?: number;
}

async function flow(sql: Sql, slug: string, steps: Step[]) {
  await sql`select pgflow.create_flow(${slug}, 3, 1, 60, 'routed')`;
  for (const s of steps) {
    await sql`select pgflow.add_step(flow_slug => ${slug}, step_slug => ${s.slug},
      deps_slugs => ${s.deps ?? []}::text[], step_type => ${s.type ?? "single"},
      max_attempts => ${s.maxAttempts ?? null}::int,
      required_input_pattern => ${
      s.ifPattern === undefined ? null : sql.json(s.ifPattern as never)
    }::jsonb,
      forbidden_input_pattern => ${
      s.ifNot === undefined ? null : sql.json(s.ifNot as never)
    }::jsonb,
      when_unmet => ${s.whenUnmet ?? "skip"}, when_exhausted => ${s.whenExhausted ?? "fail"},
      queue_name => ${s.queue})`;
  }
}

async function states(sql: Sql, runId: string) {
  const rows =
    await sql`select step_slug, status, skip_reason from pgflow.step_states where run_id = ${runId} order by step_slug`;
  return Object.fromEntries(
    rows.map((r) => [r.step_slug, r.skip_reason ? `${r.status}:${r.skip_reason}` : r.status]),
  );
}

async function work(
  sql: Sql,
  queue: string,
  flowSlug: string,
  step: string,
  runId: string,
  outcome: unknown | Error,
) {
  const worker = await registerWorker(sql, queue);
  const rows = (await readAndStart(sql, queue, worker, [[flowSlug, step]], 100)).filter((r) =>
    r.run_id === runId
  );
  for (const r of rows) {
    if (outcome instanceof Error) {
      await sql`select pgflow.fail_task(${runId}, ${step}, ${r.task_index}, ${outcome.message}, ${r.attempt})`;
    } else {await sql`select pgflow.complete_task(${runId}, ${step}, ${r.task_index}, ${
        sql.json(outcome as never)
      }, ${r.attempt})`;}
  }
  return rows;
}

db.test("root conditions match the run input: met runs, unmet skips, ifNot excludes", async ({ sql }) => {
  await flow(sql, "cond_root", [
    { slug: "pro_only", queue: "cond_a", ifPattern: { plan: "pro" } },
    { slug: "not_banned", queue: "cond_a", ifNot: { banned: true } },
    { slug: "after", deps: ["pro_only", "not_banned"], queue: "cond_b" },
  ]);
  const [run] =
    await sql`select * from pgflow.start_flow('cond_root', '{"plan": "free", "banned": false}')`;
  assert.deepEqual(await states(sql, run.run_id), {
    after: "created",
    not_banned: "started",
    pro_only: "skipped:condition_unmet",
  });
  await work(sql, "cond_a", "cond_root", "not_banned", run.run_id, "ok");
  const [after] = await work(sql, "cond_b", "cond_root", "after", run.run_id, 1);
  assert.deepEqual(
    after.input,
    { not_banned: "ok" },
    "a skipped dependency is absent from the input",
  );
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { after: 1 }]);
});

db.test("dependent conditions match the dependency object; whenUnmet fail fails the run", async ({ sql }) => {
  await flow(sql, "cond_dep", [
    { slug: "score", queue: "cond_a" },
    {
      slug: "escalate",
      deps: ["score"],
      queue: "cond_b",
      ifPattern: { score: { high: true } },
      whenUnmet: "fail",
    },
  ]);
  const [ok] = await sql`select * from pgflow.start_flow('cond_dep', '{}')`;
  await work(sql, "cond_a", "cond_dep", "score", ok.run_id, { high: true });
  assert.equal((await states(sql, ok.run_id)).escalate, "started");
  const [bad] = await sql`select * from pgflow.start_flow('cond_dep', '{}')`;
  await work(sql, "cond_a", "cond_dep", "score", bad.run_id, { high: false });
  const [failed] =
    await sql`select status, error_message from pgflow.runs where run_id = ${bad.run_id}`;
  assert.deepEqual([failed.status, failed.error_message], [
    "failed",
    "[CONDITION_UNMET] step escalate: its if/ifNot condition does not hold",
  ]);
});

db.test("skip-cascade on an unmet condition skips dependents across queues; others still run", async ({ sql }) => {
  await flow(sql, "cascade", [
    { slug: "gate", queue: "cas_a", ifPattern: { go: true }, whenUnmet: "skip-cascade" },
    { slug: "child", deps: ["gate"], queue: "cas_b" },
    { slug: "grandchild", deps: ["child"], queue: "cas_c" },
    { slug: "independent", queue: "cas_c" },
  ]);
  const [run] = await sql`select * from pgflow.start_flow('cascade', '{"go": false}')`;
  assert.deepEqual(await states(sql, run.run_id), {
    child: "skipped:dependency_skipped",
    gate: "skipped:condition_unmet",
    grandchild: "skipped:dependency_skipped",
    independent: "started",
  });
  await work(sql, "cas_c", "cascade", "independent", run.run_id, "done");
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { independent: "done" }]);
});

db.test("whenExhausted skip: the step is skipped after its last attempt and dependents go on", async ({ sql }) => {
  await flow(sql, "exhaust_skip", [
    { slug: "flaky", queue: "ex_a", maxAttempts: 1, whenExhausted: "skip" },
    { slug: "next", deps: ["flaky"], queue: "ex_b" },
  ]);
  const [run] = await sql`select * from pgflow.start_flow('exhaust_skip', '{}')`;
  await work(sql, "ex_a", "exhaust_skip", "flaky", run.run_id, new Error("boom"));
  assert.deepEqual(await states(sql, run.run_id), {
    flaky: "skipped:handler_failed",
    next: "started",
  });
  const [err] =
    await sql`select error_message from pgflow.step_states where run_id = ${run.run_id} and step_slug = 'flaky'`;
  assert.equal(err.error_message, "boom");
  const [next] = await work(sql, "ex_b", "exhaust_skip", "next", run.run_id, 2);
  assert.deepEqual(next.input, {});
  assert.equal(
    (await sql`select status from pgflow.runs where run_id = ${run.run_id}`)[0].status,
    "completed",
  );
});

db.test("whenExhausted skip-cascade on a map archives its outstanding messages and cascades over queues", async ({ sql }) => {
  await flow(sql, "exhaust_cascade", [
    { slug: "items", type: "map", queue: "exc_a", maxAttempts: 1, whenExhausted: "skip-cascade" },
    { slug: "report", deps: ["items"], queue: "exc_b" },
    { slug: "notify", deps: ["report"], queue: "exc_c" },
    { slug: "audit", queue: "exc_c" },
  ]);
  const [run] = await sql`select * from pgflow.start_flow('exhaust_cascade', '[1, 2, 3]')`;
  const worker = await registerWorker(sql, "exc_a");
  const rows = await readAndStart(sql, "exc_a", worker, [["exhaust_cascade", "items"]], 1);
  assert.equal(rows.length, 1);
  await sql`select pgflow.fail_task(${run.run_id}, 'items', ${rows[0].task_index}, 'bad item', ${
    rows[0].attempt
  })`;
  assert.deepEqual(await states(sql, run.run_id), {
    audit: "started",
    items: "skipped:handler_failed",
    notify: "skipped:dependency_skipped",
    report: "skipped:dependency_skipped",
  });
  const tasks = await sql`select task_index, status, message_id::text as id from pgflow.step_tasks
                          where run_id = ${run.run_id} and step_slug = 'items' order by task_index`;
  assert.deepEqual(tasks.map((t) => t.status).sort(), ["cancelled", "cancelled", "failed"]);
  const live = (await queueMessages(sql, "exc_a")).map((m) => m.msg_id);
  const archived = (await archivedMessages(sql, "exc_a")).map((m) => m.msg_id);
  for (const t of tasks) {
    assert.ok(!live.includes(t.id) && archived.includes(t.id), `item ${t.task_index} archived`);
  }
  assert.equal((await queueMessages(sql, "exc_b")).length, 0);
  await work(sql, "exc_c", "exhaust_cascade", "audit", run.run_id, "logged");
  const [done] = await sql`select status, output from pgflow.runs where run_id = ${run.run_id}`;
  assert.deepEqual([done.status, done.output], ["completed", { audit: "logged" }]);
});

db.test("a map over a skipped dependency is skipped and releases its dependents", async ({ sql }) => {
  await flow(sql, "map_after_skip", [
    { slug: "list", queue: "mas_a", ifPattern: { has: true } },
    { slug: "each", deps: ["list"], type: "map", queue: "mas_a" },
    { slug: "final", deps: ["each"], queue: "mas_b" },
  ]);
  const [run] = await sql`select * from pgflow.start_flow('map_after_skip', '{"has": false}')`;
  assert.deepEqual(await states(sql, run.run_id), {
    each: "skipped:dependency_skipped",
    final: "started",
    list: "skipped:condition_unmet",
  });
  const [fin] = await work(sql, "mas_b", "map_after_skip", "final", run.run_id, true);
  assert.deepEqual(fin.input, {});
});
