/**
 * `pgflow dashboard` without a browser: every read runs in a read-only transaction (a write
 * inside one fails, and serving the page changes nothing), the JSON the page polls (stuck tasks
 * by reason, failures, coverage, one run's steps), the HTTP rules (GET only, loopback Host names,
 * run ids checked), the coverage status before and after the status column, and the flags.
 */
import assert from "node:assert/strict";
import { createPool } from "../../src/platform/pool.ts";
import { readOnly } from "../../src/cli/dashboard/read_only.ts";
import { startDashboard } from "../../src/cli/dashboard/server.ts";
import type { Overview, RunDetail } from "../../src/cli/dashboard/queries.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { testDatabase } from "../support/db.ts";
import { startDashboardCli } from "./dashboard_cli.ts";
import { databaseState, runCli, servePublished, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("a dashboard read cannot write: the transaction is read-only", async ({ url }) => {
  const pool = createPool(url, { max: 1 });
  try {
    await assert.rejects(
      readOnly(
        pool,
        (tx) => tx`insert into pgflow.settings (key, value) values ('worker_retention', '"1 day"')`,
      ),
      (e: { code?: string }) => e.code === "25006",
    );
    // A function that writes fails the same way: the guarantee is the transaction's, not the SQL's.
    await assert.rejects(
      readOnly(pool, (tx) => tx`select pgflow.set_local_development(true)`),
      (e: { code?: string }) => e.code === "25006",
    );
    const [{ ro }] = await readOnly(
      pool,
      (tx) => tx<{ ro: string }[]>`select current_setting('transaction_read_only') as ro`,
    );
    assert.equal(ro, "on");
  } finally {
    await pool.end({ timeout: 5 });
  }
});

db.test("the overview lists stuck tasks by reason, failures and coverage; serving changes nothing", async ({ sql, url }) => {
  await defineFlow(sql, "dq_flow", [{ slug: "work", queue: "dq_work", timeout: 3 }], {
    mode: "routed",
    maxAttempts: 1,
  });
  const runs: string[] = [];
  for (let i = 0; i < 4; i++) {
    const [{ run_id }] = await sql`select run_id from pgflow.start_flow('dq_flow', ${
      sql.json({ i })
    })`;
    runs.push(run_id);
  }
  const pair: [string, string][] = [["dq_flow", "work"]];
  const silent = await registerWorker(sql, "dq_work");
  const [first] = await readAndStart(sql, "dq_work", silent, pair, 1);
  const live = await registerWorker(sql, "dq_work");
  const [second] = await readAndStart(sql, "dq_work", live, pair, 1);
  const [third] = await readAndStart(sql, "dq_work", live, pair, 1);
  // Set the scene: the first holder went silent, the second task ran past its 3 s timeout, the
  // third failed with markup in its error, and the fourth has waited in the queue for 2 minutes.
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '5 minutes'
            where worker_id = ${silent}::uuid`;
  await sql`update pgflow.step_tasks set started_at = now() - interval '10 seconds'
            where run_id = ${second.run_id}::uuid`;
  await sql`select pgflow.fail_task(${third.run_id}::uuid, 'work', 0, '<b>bad</b> & "worse"',
                                 ${third.attempt}::int)`;
  await sql`update pgflow.step_tasks set queued_at = now() - interval '2 minutes'
            where run_id = ${runs[3]}::uuid`;

  const before = await databaseState(url);
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0, queuedAfterSeconds: 60 });
  try {
    const res = await fetch(new URL("api/overview", dashboard.url));
    assert.equal(res.status, 200);
    const o: Overview = await res.json();
    const stuck = Object.fromEntries(o.stuck.map((t) => [t.runId, t.reason]));
    assert.deepEqual(stuck, {
      [first.run_id!]: "stale worker",
      [second.run_id!]: "past timeout",
      [runs[3]]: "queued too long",
    });
    const held = o.stuck.find((t) => t.runId === first.run_id)!;
    assert.equal(held.workerId, silent);
    assert.ok(held.heartbeatSeconds! >= 299, String(held.heartbeatSeconds));
    assert.deepEqual(o.failures.map((f) => [f.runId, f.stepSlug, f.error]), [
      [third.run_id, "work", '<b>bad</b> & "worse"'],
    ]);
    assert.deepEqual(o.runCounts, [{ flowSlug: "dq_flow", started: 3, completed: 0, failed: 1 }]);
    // registerWorker lists no pairs, so no live worker serves the step and work waits: MISSING.
    assert.deepEqual(
      o.coverage.map((c) => [c.queueName, c.flowSlug, c.stepSlug]),
      [["dq_work", "dq_flow", "work"]],
    );
    assert.equal(o.coverage[0].status, "MISSING");
    assert.equal(o.coverage[0].queuedTasks, 1);
    assert.equal(o.coverage[0].startedTasks, 2);
    assert.equal(o.coverage[0].staleTasks, 1, "the silent holder's task");
    const queue = o.queues.find((q) => q.name === "dq_work")!;
    assert.equal(queue.messages, 3, "the failed task's message is archived");
    assert.equal(queue.liveWorkers, 1, "the silent worker is not live");

    const detail: RunDetail =
      await (await fetch(new URL(`api/runs/${third.run_id}`, dashboard.url)))
        .json();
    assert.equal(detail.status, "failed");
    assert.deepEqual(detail.steps.map((s) => [s.stepSlug, s.status, s.attempts, s.error]), [
      ["work", "failed", 1, '<b>bad</b> & "worse"'],
    ]);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
  assert.deepEqual(await databaseState(url), before, "serving the dashboard changes nothing");
});

db.test("HTTP: GET only, loopback Host names only, run ids checked, assets with a strict CSP", async ({ url }) => {
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  const base = new URL(dashboard.url);
  try {
    assert.equal(base.hostname, "127.0.0.1", "binds to loopback by default");
    const page = await fetch(base);
    assert.equal(page.status, 200);
    assert.match(await page.text(), /<title>pgflow dashboard<\/title>/);
    assert.match(page.headers.get("content-security-policy")!, /script-src 'self'/);
    for (const asset of ["dashboard.js", "dashboard.css"]) {
      const res = await fetch(new URL(asset, base));
      assert.equal(res.status, 200, asset);
      await res.body?.cancel();
    }
    const post = await fetch(new URL("api/overview", base), { method: "POST", body: "{}" });
    assert.equal(post.status, 405);
    await post.body?.cancel();
    const bad = await fetch(new URL("api/runs/not-a-uuid", base));
    assert.equal(bad.status, 400);
    assert.deepEqual(await bad.json(), { error: "a run id is a UUID" });
    const id = crypto.randomUUID();
    const none = await fetch(new URL(`api/runs/${id}`, base));
    assert.equal(none.status, 404);
    assert.deepEqual(await none.json(), { error: `no run ${id}` });
    const missing = await fetch(new URL("nothing", base));
    assert.equal(missing.status, 404);
    await missing.body?.cancel();
    // A rebinding attack sends the attacker's host name: refused.
    const rebound = await rawGet(base, "evil.example:" + base.port);
    assert.match(rebound, /^HTTP\/1\.1 421/);
    assert.match(await rawGet(base, `localhost:${base.port}`), /^HTTP\/1\.1 200/);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

/** A GET with a chosen Host header (fetch does not allow setting it). */
async function rawGet(base: URL, host: string): Promise<string> {
  const conn = await Deno.connect({ hostname: base.hostname, port: Number(base.port) });
  try {
    await conn.write(
      new TextEncoder().encode(`GET / HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`),
    );
    const chunks: Uint8Array[] = [];
    const buf = new Uint8Array(4096);
    for (;;) {
      const n = await conn.read(buf);
      if (n === null) break;
      chunks.push(buf.slice(0, n));
    }
    return new TextDecoder().decode(new Uint8Array(chunks.flatMap((c) => [...c])));
  } finally {
    try {
      conn.close();
    } catch { /* closed by the server */ }
  }
}

Deno.test("dashboard flags: --help, bad numbers and a missing database are usage errors", async () => {
  const help = await runCli(["dashboard", "--help"]);
  assert.equal(help.code, 0, shown(help));
  assert.match(help.stdout, /^pgflow dashboard \[--port N\] \[--host H\] \[--database-url URL\]/);
  assert.match(help.stdout, /default 127\.0\.0\.1/);
  const top = await runCli(["--help"]);
  assert.match(top.stdout, /^ {2}dashboard +a live, read-only web page/m);
  for (
    const [args, message] of [
      [["--port", "http"], /--port must be a whole number from 0 to 65535, got "http"/],
      [["--port", "70000"], /--port must be a whole number from 0 to 65535, got "70000"/],
      [["--stuck-after", "0"], /--stuck-after must be a whole number from 1 to 86400/],
      [["--prot", "1"], /unknown flag "--prot" for pgflow dashboard/],
      [[], /pgflow dashboard needs a database: pass --database-url/],
    ] as const
  ) {
    const run = await runCli(["dashboard", ...args]);
    assert.equal(run.code, 2, shown(run));
    assert.match(run.stderr, message);
  }
});

db.test("a port in use is a clear error", async ({ url }) => {
  const taken = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  try {
    const port = (taken.addr as Deno.NetAddr).port;
    const run = await runCli(["dashboard", "--port", String(port), "--database-url", url]);
    assert.equal(run.code, 1, shown(run));
    assert.match(
      run.stderr,
      new RegExp(`port ${port} on 127\\.0\\.0\\.1 is in use; pass another --port`),
    );
  } finally {
    taken.close();
  }
});

db.test(
  "run from the published module (as from JSR), it serves its page, script and data",
  async ({ url }) => {
    const served = await servePublished();
    const dashboard = await startDashboardCli(["--database-url", url], served.entry);
    try {
      assert.match(dashboard.pageUrl, /^http:\/\/127\.0\.0\.1:\d+\/$/, dashboard.stderr());
      const page = await fetch(dashboard.pageUrl);
      assert.match(await page.text(), /<script src="\/dashboard\.js" defer><\/script>/);
      const script = await fetch(new URL("dashboard.js", dashboard.pageUrl));
      assert.match(await script.text(), /\/api\/overview/);
      const overview = await fetch(new URL("api/overview", dashboard.pageUrl));
      assert.equal(overview.status, 200);
      assert.deepEqual((await overview.json()).runCounts, []);
      assert.match(dashboard.stderr(), /read-only, no login/);
      assert.ok(!dashboard.stderr().includes("password"));
    } finally {
      assert.equal(await dashboard.stop(), 0, dashboard.stderr());
      await served.close();
    }
  },
  { fresh: true },
);
