/**
 * `pgflow dashboard` without a browser: every read runs in a read-only transaction (a write
 * inside one fails, and serving the page changes nothing), the JSON the page polls (stuck tasks
 * by reason, failures, coverage, one run's steps), the HTTP rules (GET and HEAD only, a Host allow-list for
 * every bind, run ids and percent-escapes checked), the coverage status before and after the
 * status column, and the flags.
 */
import assert from "node:assert/strict";
import { createPool } from "../../src/platform/pool.ts";
import { readOnly } from "../../src/cli/dashboard/read_only.ts";
import { startDashboard } from "../../src/cli/dashboard/server.ts";
import { allowedHosts, hostAllowed, parseHost, showHost } from "../../src/cli/dashboard/hosts.ts";
import type { Overview } from "../../src/cli/dashboard/queries.ts";
import type { RunDetail } from "../../src/cli/dashboard/run_view.ts";
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
    assert.deepEqual(o.runCounts, [
      { flowSlug: "dq_flow", started: 3, completed: 0, failed: 1, cancelled: 0 },
    ]);
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

db.test("HTTP: GET and HEAD only, loopback Host names only, run ids checked, assets with a strict CSP", async ({ url }) => {
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
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    await post.body?.cancel();
    // HEAD answers as GET does, without a body.
    const head = await fetch(base, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.match(head.headers.get("content-type")!, /text\/html/);
    assert.equal(await head.text(), "");
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
    assert.match(rebound, /--allow-host/);
    assert.match(await rawGet(base, `localhost:${base.port}`), /^HTTP\/1\.1 200/);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

/**
 * A GET with a chosen Host header (fetch does not allow setting it), sent to `base`'s port on
 * `connectTo` (default `base`'s host); `host: null` sends an HTTP/1.0 request without one.
 */
async function rawGet(
  base: URL,
  host: string | null,
  { path = "/", connectTo = base.hostname }: { path?: string; connectTo?: string } = {},
): Promise<string> {
  const conn = await Deno.connect({ hostname: connectTo, port: Number(base.port) });
  try {
    const head = host === null
      ? `GET ${path} HTTP/1.0\r\n\r\n`
      : `GET ${path} HTTP/1.1\r\nHost: ${host}\r\nConnection: close\r\n\r\n`;
    await conn.write(new TextEncoder().encode(head));
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

/** The status code of a raw HTTP answer. */
function statusOf(answer: string): number {
  return Number(/^HTTP\/1\.[01] (\d{3})/.exec(answer)?.[1]);
}

Deno.test("Host values: parsed and normalised, and the allow-list each bind implies", () => {
  assert.deepEqual(parseHost("Dash.Example:8080"), { host: "dash.example", port: 8080 });
  assert.deepEqual(parseHost("[0:0::1]:80"), { host: "[::1]", port: 80 });
  assert.deepEqual(parseHost("::1"), { host: "[::1]" });
  assert.deepEqual(parseHost("10.0.0.5"), { host: "10.0.0.5" });
  for (
    const bad of [
      "",
      " x",
      "http://x",
      "a b",
      "x:0",
      "x:65536",
      "x:",
      "x/y",
      "u@x",
      "[zz]",
      "[::1",
      "300.0.0.1",
      "127.1",
      "-x.example",
      "x:80:80",
    ]
  ) {
    assert.equal(parseHost(bad), undefined, bad);
  }
  const own = () => ["10.0.0.5", "[fd00::5]"];
  const hosts = (bind: string, extra: string[] = []) =>
    allowedHosts(bind, extra.map((e) => parseHost(e)!), own).map(showHost);
  assert.deepEqual(hosts("127.0.0.1"), ["127.0.0.1", "localhost", "[::1]"]);
  assert.deepEqual(hosts("::1"), ["[::1]", "localhost", "127.0.0.1"]);
  assert.deepEqual(hosts("0.0.0.0", ["dash.example", "proxy.example:9000"]), [
    "0.0.0.0",
    "localhost",
    "127.0.0.1",
    "[::1]",
    "10.0.0.5",
    "[fd00::5]",
    "dash.example",
    "proxy.example:9000",
  ]);
  assert.deepEqual(hosts("::"), [
    "[::]",
    "localhost",
    "127.0.0.1",
    "[::1]",
    "10.0.0.5",
    "[fd00::5]",
  ]);
  // A specific address: itself and the names given, not loopback names nor other addresses.
  assert.deepEqual(hosts("10.0.0.5", ["dash.example"]), ["10.0.0.5", "dash.example"]);
  const list = allowedHosts("10.0.0.5", [parseHost("proxy.example:9000")!], own);
  assert.ok(hostAllowed("10.0.0.5:8765", list, 8765));
  assert.ok(hostAllowed("10.0.0.5", list, 8765), "no port: the default port, via a proxy");
  assert.ok(!hostAllowed("10.0.0.5:8766", list, 8765));
  assert.ok(hostAllowed("PROXY.example:9000", list, 8765));
  assert.ok(!hostAllowed("proxy.example:8765", list, 8765));
  assert.ok(!hostAllowed("localhost:8765", list, 8765));
  assert.ok(!hostAllowed(null, list, 8765));
  assert.ok(!hostAllowed("evil.example:8765", list, 8765));
});

db.test("a wildcard or other address still checks Host: the allow-list, and a good Host works", async ({ url }) => {
  const pool = createPool(url, { max: 1 });
  const wild = startDashboard(pool, {
    hostname: "0.0.0.0",
    port: 0,
    allowHosts: ["dash.example", "proxy.example:9000"],
  });
  // Any address of 127/8 is loopback on Linux: a bind that is neither 127.0.0.1 nor a wildcard.
  const other = startDashboard(pool, { hostname: "127.0.0.2", port: 0 });
  try {
    const base = new URL(wild.url);
    const port = base.port;
    const status = async (host: string | null) =>
      statusOf(await rawGet(base, host, { connectTo: "127.0.0.1" }));
    for (
      const host of [
        `127.0.0.1:${port}`,
        `localhost:${port}`,
        `0.0.0.0:${port}`,
        `dash.example:${port}`,
        `DASH.EXAMPLE:${port}`,
        "dash.example",
        "proxy.example:9000",
      ]
    ) {
      assert.equal(await status(host), 200, host);
    }
    for (
      const host of [
        `evil.example:${port}`,
        "evil.example",
        `dash.example:${Number(port) + 1}`,
        `proxy.example:${port}`,
        `dash.example.evil.example:${port}`,
        null,
      ]
    ) {
      assert.equal(await status(host), 421, String(host));
    }
    // This machine's own addresses are numbers, which a rebinding page cannot use as its name.
    const own = Deno.networkInterfaces().find((i) =>
      i.family === "IPv4" && !/^127\./.test(i.address)
    );
    if (own) assert.equal(await status(`${own.address}:${port}`), 200, own.address);
    // The API answers too, and a good Host reads data.
    const api = await rawGet(base, `dash.example:${port}`, {
      path: "/api/overview",
      connectTo: "127.0.0.1",
    });
    assert.equal(statusOf(api), 200);
    assert.match(api, /"runCounts"/);

    const second = new URL(other.url);
    assert.equal(second.hostname, "127.0.0.2");
    assert.equal(statusOf(await rawGet(second, `127.0.0.2:${second.port}`)), 200);
    assert.equal(statusOf(await rawGet(second, `localhost:${second.port}`)), 200);
    assert.equal(statusOf(await rawGet(second, `evil.example:${second.port}`)), 421);
  } finally {
    await wild.shutdown();
    await other.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test(
  "the command: a malformed percent-escape answers 400 and logs nothing; --host 0.0.0.0 takes --allow-host names",
  async ({ url }) => {
    const dashboard = await startDashboardCli([
      "--database-url",
      url,
      "--host",
      "0.0.0.0",
      "--allow-host",
      "a.example",
      "--allow-host=b.example:9000",
    ]);
    try {
      const base = new URL(dashboard.pageUrl);
      assert.equal(base.hostname, "0.0.0.0", dashboard.stderr());
      const local = new URL(`http://127.0.0.1:${base.port}/`);
      const id = crypto.randomUUID();
      for (
        const path of [
          "/api/runs/%",
          "/api/runs/%E0%A4%A",
          "/api/runs/%zz",
          "/api/runs/%E0%A4", // escapes well formed, but a cut UTF-8 sequence
          `/api/runs/${id}?q=%`,
          "/api/overview?x=%E0%A4%A",
          "/api/overview?%=1",
          "/api/%",
        ]
      ) {
        const res = await fetch(new URL(path, local));
        assert.equal(res.status, 400, path);
        assert.deepEqual(await res.json(), { error: "malformed percent-escape in the URL" }, path);
      }
      for (const path of ["/%", "/dashboard.js%E0", "/?x=%"]) {
        const res = await fetch(new URL(path, local));
        assert.equal(res.status, 400, path);
        assert.equal(await res.text(), "malformed percent-escape in the URL\n", path);
      }
      // Well-formed escapes still decode: an escaped run id is read as the id.
      const escaped = await fetch(new URL(`/api/runs/${id.replaceAll("-", "%2D")}`, local));
      assert.equal(escaped.status, 404);
      assert.deepEqual(await escaped.json(), { error: `no run ${id}` });

      assert.equal(statusOf(await rawGet(local, `a.example:${base.port}`)), 200);
      assert.equal(statusOf(await rawGet(local, "b.example:9000")), 200);
      assert.equal(statusOf(await rawGet(local, `b.example:${base.port}`)), 421);
      assert.equal(statusOf(await rawGet(local, `evil.example:${base.port}`)), 421);
      assert.match(
        dashboard.stderr(),
        /answering Host 0\.0\.0\.0, localhost, 127\.0\.0\.1, \[::1\], .*a\.example, b\.example:9000 only; add names with --allow-host/,
      );
    } finally {
      assert.equal(await dashboard.stop(), 0, dashboard.stderr());
    }
    const log = dashboard.stderr();
    assert.doesNotMatch(log, /^\s+at /m, log);
    assert.doesNotMatch(log, /URIError|Error:/, log);
  },
);

Deno.test("dashboard flags: --help, bad numbers and a missing database are usage errors", async () => {
  const help = await runCli(["dashboard", "--help"]);
  assert.equal(help.code, 0, shown(help));
  assert.match(
    help.stdout,
    /^pgflow dashboard \[--port N\] \[--host H\] \[--allow-host NAME\]\.\.\. \[--database-url URL\]/,
  );
  assert.match(help.stdout, /default 127\.0\.0\.1/);
  assert.match(help.stdout, /--allow-host NAME .*\n.*repeatable/);
  assert.match(help.stdout, /DNS rebinding/);
  assert.match(help.stdout, /this machine's own IP addresses when\s+bound to 0\.0\.0\.0/);
  const top = await runCli(["--help"]);
  assert.match(top.stdout, /^ {2}dashboard +a live, read-only web page/m);
  for (
    const [args, message] of [
      [["--port", "http"], /--port must be a whole number from 0 to 65535, got "http"/],
      [["--port", "70000"], /--port must be a whole number from 0 to 65535, got "70000"/],
      [["--stuck-after", "0"], /--stuck-after must be a whole number from 1 to 86400/],
      [["--prot", "1"], /unknown flag "--prot" for pgflow dashboard/],
      [
        ["--host", "0.0.0.0:8080"],
        /--host must be an IP address or host name without a port \(e\.g\. 127\.0\.0\.1, 0\.0\.0\.0, ::1\), got "0\.0\.0\.0:8080"; give the port with --port$/,
      ],
      [
        ["--host", "http://0.0.0.0"],
        /--host must be an IP address or host name .*got "http:\/\/0\.0\.0\.0"$/,
      ],
      [["--host", "300.1.1.1"], /--host must be .*got "300\.1\.1\.1"$/],
      [["--host", "[::1"], /--host must be .*got "\[::1"$/],
      [
        ["--allow-host", "a.example", "--allow-host", "a b"],
        /--allow-host must be a host name or IP address, optionally with :PORT \(e\.g\. dash\.example\.com, 10\.0\.0\.5:8765, \[fd00::5\]\), got "a b"$/,
      ],
      [
        ["--allow-host", "https://dash.example/"],
        /--allow-host must be .*got "https:\/\/dash\.example\/"$/,
      ],
      [["--allow-host", "dash.example:99999"], /--allow-host must be .*got "dash\.example:99999"$/],
      [["--allow-host"], /--allow-host needs a value/],
      [[], /pgflow dashboard needs a database: pass --database-url/],
    ] as const
  ) {
    const run = await runCli(["dashboard", ...args]);
    assert.equal(run.code, 2, shown(run));
    assert.match(run.stderr.trim(), message);
    assert.equal(run.stderr.trim().split("\n").length, 1, shown(run));
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
