/** Operator tools: coverage check, deploy fence, keep-alive. */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

async function register(sql: Sql, queue: string, fn: string, supported: [string, string][]) {
  const id = crypto.randomUUID();
  await sql`select pgflow.register_worker(${id}, ${queue}, ${fn}, ${sql.json(supported)})`;
  return id;
}

async function coverage(sql: Sql, queue: string | null = null) {
  const rows = await sql`select * from pgflow.queue_coverage(${queue})`;
  return rows.map((r) =>
    `${r.queue_name} ${r.flow_slug}.${r.step_slug} ${r.status} q${r.queued_tasks} s${r.started_tasks}`
  );
}

db.test("coverage: MISSING only where work waits; a stopped or stale worker is gone", async ({ sql }) => {
  await defineFlow(sql, "cov_v1", [
    { slug: "classify", queue: "cov_shared" },
    { slug: "enrich", deps: ["classify"], queue: "cov_shared" },
    { slug: "deliver", deps: ["enrich"], queue: "cov_slack" },
  ], { mode: "routed" });
  await sql`select pgflow.start_flow('cov_v1', '{}')`;
  const w1 = await register(sql, "cov_shared", "fn_shared", [["cov_v1", "classify"]]);
  await register(sql, "cov_slack", "fn_slack", [["cov_v1", "deliver"]]);
  // enrich has no handler but no work either (its task waits on classify): idle, not MISSING.
  assert.deepEqual(await coverage(sql), [
    "cov_shared cov_v1.classify ok q1 s0",
    "cov_shared cov_v1.enrich idle q0 s0",
    "cov_slack cov_v1.deliver ok q0 s0",
  ]);
  await sql`select pgflow.mark_worker_stopped(${w1})`;
  assert.deepEqual(await coverage(sql, "cov_shared"), [
    "cov_shared cov_v1.classify MISSING q1 s0",
    "cov_shared cov_v1.enrich idle q0 s0",
  ]);
  // A stale heartbeat counts as gone too.
  await register(sql, "cov_shared", "fn_shared", [["cov_v1", "classify"], ["cov_v1", "enrich"]]);
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '1 minute' where queue_name = 'cov_shared'`;
  assert.deepEqual(await coverage(sql, "cov_shared"), [
    "cov_shared cov_v1.classify MISSING q1 s0",
    "cov_shared cov_v1.enrich idle q0 s0",
  ]);
});

db.test("coverage lists pairs of in-flight tasks even when the route is gone", async ({ sql }) => {
  await defineFlow(sql, "cov_old", [{ slug: "a", queue: "cov_moved" }], { mode: "routed" });
  await sql`select pgflow.start_flow('cov_old', '{}')`;
  // Simulate a route that no longer names the queue while a task still snapshots it.
  await sql`update pgflow.step_tasks set queue_name = 'cov_legacy' where flow_slug = 'cov_old'`;
  const rows = await sql`select * from pgflow.queue_coverage('cov_legacy')`;
  assert.deepEqual(
    rows.map((
      r,
    ) => [r.flow_slug, r.step_slug, r.routed, Number(r.queued_tasks), r.served, r.status]),
    [
      ["cov_old", "a", false, 1, false, "MISSING"],
    ],
  );
});

db.test("a deploy fence drains workers, blocks registration and restores exactly the recorded flags", async ({ sql }) => {
  await defineFlow(sql, "fence_f", [{ slug: "a", queue: "fence_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('fence_f', '{}')`;
  const worker = await register(sql, "fence_q", "fn_fence_a", [["fence_f", "a"]]);
  await register(sql, "fence_other", "fn_fence_b", []);
  await sql`update pgflow.worker_functions set enabled = false where function_name = 'fn_fence_b'`;
  const [claimed] = await readAndStart(sql, "fence_q", worker, [["fence_f", "a"]]);

  const [{ fence }] =
    await sql`select pgflow.begin_deploy_fence('{fn_fence_a,fn_fence_b,fn_fence_new}', 'v2 deploy') as fence`;
  assert.equal(
    (await sql`select pgflow.heartbeat(${worker}) as d`)[0].d,
    true,
    "the worker learns it is deprecated",
  );
  await assert.rejects(
    () => register(sql, "fence_q", "fn_fence_a", []),
    /worker function fn_fence_a is disabled/,
  );
  await assert.rejects(
    () => register(sql, "fence_q", "fn_fence_new", []),
    /worker function fn_fence_new is disabled/,
  );
  await assert.rejects(
    () => sql`select pgflow.begin_deploy_fence('{fn_fence_a}')`,
    /already inside an open deploy fence/,
  );

  const status = async () =>
    (await sql`select * from pgflow.deploy_fence_status(${fence})`).map((r) =>
      `${r.function_name} live=${r.live_workers} started=${r.started_tasks} drained=${r.drained}`
    );
  assert.deepEqual(await status(), [
    "fn_fence_a live=1 started=1 drained=false",
    "fn_fence_b live=1 started=0 drained=false",
    "fn_fence_new live=0 started=0 drained=true",
  ]);
  // The worker finishes what it holds and stops; the other one's heartbeat goes stale.
  await sql`select pgflow.complete_task(${claimed.run_id}, 'a', 0, '1', ${claimed.attempt})`;
  await sql`select pgflow.mark_worker_stopped(${worker})`;
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '1 minute' where function_name = 'fn_fence_b'`;
  assert.ok((await status()).every((s) => s.endsWith("drained=true")));

  assert.deepEqual(
    (await sql`select * from pgflow.ensure_workers()`).filter((r) =>
      r.function_name.startsWith("fn_fence")
    ),
    [],
    "the keep-alive never starts a disabled function",
  );
  await sql`select pgflow.end_deploy_fence(${fence})`;
  const flags = await sql`select function_name, enabled from pgflow.worker_functions
                          where function_name like 'fn\\_fence%' order by 1`;
  assert.deepEqual(flags.map((f) => `${f.function_name}=${f.enabled}`), [
    "fn_fence_a=true",
    "fn_fence_b=false",
    "fn_fence_new=true",
  ]);
  await register(sql, "fence_q", "fn_fence_a", [["fence_f", "a"]]);
  await assert.rejects(
    () => register(sql, "fence_other", "fn_fence_b", []),
    /fn_fence_b is disabled/,
  );
  await assert.rejects(() => sql`select pgflow.end_deploy_fence(${fence})`, /has already ended/);
});

db.test("ensure_workers picks enabled functions without live workers, once per debounce", async ({ sql }) => {
  await register(sql, "ka_q", "fn_ka_live", []);
  const gone = await register(sql, "ka_q", "fn_ka_gone", []);
  await sql`select pgflow.mark_worker_stopped(${gone})`;
  const picked = async () =>
    (await sql`select * from pgflow.ensure_workers()`).filter((r) =>
      r.function_name.startsWith("fn_ka")
    )
      .map((r) => `${r.function_name} pinged=${r.pinged}`);
  assert.deepEqual(
    await picked(),
    ["fn_ka_gone pinged=false"],
    "no pg_net here: picked, not pinged",
  );
  assert.deepEqual(await picked(), [], "debounced");
  await assert.rejects(() => sql`select pgflow.schedule_maintenance()`, /pg_cron is not installed/);
});

db.test("schedule_maintenance takes only keep-alive intervals pg_cron runs exactly, and says which", async ({ sql }) => {
  const schedule = async (interval: string) =>
    (await sql`select pgflow._keep_alive_schedule(${interval}::interval) as s`)[0].s;
  assert.equal(await schedule("5 seconds"), "5 seconds");
  assert.equal(await schedule("59 seconds"), "59 seconds");
  assert.equal(await schedule("1 minute"), "* * * * *");
  assert.equal(await schedule("120 seconds"), "*/2 * * * *");
  assert.equal(await schedule("12 minutes"), "*/12 * * * *");
  assert.equal(await schedule("1 hour"), "0 * * * *");
  // Refused before pg_cron is even looked for, with the value and what is accepted: a fraction of
  // a second would be rounded to another interval, the rest pg_cron cannot express.
  for (
    const bad of [
      "119.6 seconds",
      "0.5 seconds",
      "0 seconds",
      "-5 seconds",
      "7 minutes",
      "90 seconds",
      "2 hours",
      "1 month",
    ]
  ) {
    await assert.rejects(
      () => sql`select pgflow.schedule_maintenance(${bad}::interval)`,
      (e: { code?: string; message: string; hint?: string }) => {
        assert.equal(e.code, "22023", `${bad}: ${e.message}`);
        assert.match(e.message, /^keep_alive .+ is not an interval pg_cron can run exactly$/, bad);
        assert.match(
          e.hint ?? "",
          /whole seconds from 1 to 59 .* whole minutes that divide an hour/,
        );
        return true;
      },
    );
  }
  await assert.rejects(
    () => sql`select pgflow.schedule_maintenance('119.6 seconds')`,
    /keep_alive 00:01:59\.6 is not an interval/,
  );
  await assert.rejects(
    () => sql`select pgflow.schedule_maintenance(null)`,
    /keep_alive NULL is not an interval/,
  );
});
