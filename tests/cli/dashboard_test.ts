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
import { idBounds, type RunSearchRow } from "../../src/cli/dashboard/search.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import type postgres from "postgres";
import { startDashboardCli } from "./dashboard_cli.ts";
import { databaseState, runCli, servePublished, shown } from "./helpers.ts";
import { compileNow } from "./deploy_helpers.ts";
import { Flow } from "../../mod.ts";
import { limitedFlow } from "../support/flow_control.ts";

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
    assert.deepEqual(
      detail.steps.map((s) => [
        s.stepSlug,
        s.status,
        s.attempts,
        s.minAttempts,
        s.maxAttempts,
        s.error,
      ]),
      [["work", "failed", 1, 1, 1, '<b>bad</b> & "worse"']],
    );
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
    for (const asset of ["js/main.js", "js/dom.js", "dashboard.css"]) {
      const res = await fetch(new URL(asset, base));
      assert.equal(res.status, 200, asset);
      assert.match(res.headers.get("content-security-policy")!, /script-src 'self'/, asset);
      await res.body?.cancel();
    }
    // Only the page's own modules: not their TypeScript, not a name outside the set.
    for (const asset of ["js/main.ts", "js/nothing.js", "js/constructor.js", "js/Main.js"]) {
      const res = await fetch(new URL(asset, base));
      assert.equal(res.status, 404, asset);
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
  return await rawRequest(base, host, "GET", path, {}, connectTo);
}

/** Any request with a chosen Host header and extra headers (no body), as {@link rawGet}. */
async function rawRequest(
  base: URL,
  host: string | null,
  method: string,
  path: string,
  headers: Record<string, string>,
  connectTo = base.hostname,
): Promise<string> {
  const conn = await Deno.connect({ hostname: connectTo, port: Number(base.port) });
  try {
    const extra = Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join("");
    const length = method === "POST" ? "Content-Length: 0\r\n" : "";
    const head = host === null
      ? `${method} ${path} HTTP/1.0\r\n${extra}${length}\r\n`
      : `${method} ${path} HTTP/1.1\r\nHost: ${host}\r\n${extra}${length}Connection: close\r\n\r\n`;
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
      for (const path of ["/%", "/js/main.js%E0", "/?x=%"]) {
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
  assert.match(help.stdout, /--allow-actions +also offer Cancel, Retry and Resume/);
  assert.match(help.stdout, /this machine's own IP addresses when\s+bound to 0\.0\.0\.0/);
  const top = await runCli(["--help"]);
  assert.match(
    top.stdout,
    /^ {2}dashboard +a live web page .*\n +\(read-only unless started with --allow-actions\)/m,
  );
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
      assert.match(await page.text(), /<script type="module" src="\/js\/main\.js"><\/script>/);
      // The entry and every module it imports, as a browser would load them.
      const seen = new Set<string>();
      const load = async (name: string): Promise<void> => {
        if (seen.has(name)) return;
        seen.add(name);
        const res = await fetch(new URL(`js/${name}`, dashboard.pageUrl));
        assert.equal(res.status, 200, name);
        assert.match(res.headers.get("content-type")!, /^text\/javascript/, name);
        const text = await res.text();
        for (const m of text.matchAll(/^import\b[^;"]*"\.\/([a-z_]+\.js)"/gm)) await load(m[1]);
      };
      await load("main.js");
      assert.ok(seen.has("panels.js") && seen.has("dag.js"), [...seen].join(", "));
      const main = await (await fetch(new URL("js/main.js", dashboard.pageUrl))).text();
      assert.match(main, /\/api\/overview/);
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

/** Registers a live worker on `queue` with handlers for `pairs`. */
async function liveWorker(
  sql: postgres.Sql,
  queue: string,
  pairs: [string, string][],
  fn = "dash_fn",
): Promise<string> {
  const id = crypto.randomUUID();
  await sql`select pgflow.register_worker(${id}::uuid, ${queue}, ${fn}, ${sql.json(pairs)})`;
  return id;
}

async function getRun(base: string, runId: string): Promise<RunDetail> {
  const res = await fetch(new URL(`api/runs/${runId}`, base));
  assert.equal(res.status, 200);
  return await res.json();
}

db.test("the run view says why each unfinished step waits: dependencies, no live worker, delay, a worker", async ({ sql, url }) => {
  await defineFlow(sql, "dw_flow", [
    { slug: "busy", queue: "dw_busy" },
    { slug: "after", deps: ["busy"], queue: "dw_busy" },
    { slug: "lost", queue: "dw_lost" },
    { slug: "later", queue: "dw_served", startDelay: 3600 },
    { slug: "next", queue: "dw_served" },
    { slug: "again", queue: "dw_retry", maxAttempts: 3, baseDelay: 3600 },
  ], { mode: "routed" });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('dw_flow', '{}')`;
  const busy = await liveWorker(sql, "dw_busy", [["dw_flow", "busy"], ["dw_flow", "after"]]);
  await liveWorker(sql, "dw_served", [["dw_flow", "later"], ["dw_flow", "next"]]);
  const retrier = await liveWorker(sql, "dw_retry", [["dw_flow", "again"]]);
  await readAndStart(sql, "dw_busy", busy, [["dw_flow", "busy"]], 1);
  const [again] = await readAndStart(sql, "dw_retry", retrier, [["dw_flow", "again"]], 1);
  await sql`select pgflow.fail_task(${runId}::uuid, 'again', 0, 'upstream down', ${again.attempt}::int)`;

  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const run = await getRun(dashboard.url, runId);
    const byStep = Object.fromEntries(run.steps.map((s) => [s.stepSlug, s]));
    assert.deepEqual(byStep.after.waits, [{ kind: "dependencies", deps: ["busy"] }]);
    assert.equal(byStep.after.status, "created");
    const running = byStep.busy.waits[0];
    assert.equal(running.kind, "running");
    assert.deepEqual(
      running.kind === "running" && [running.workerId, running.workerLive, running.tasks],
      [busy, true, 1],
    );
    assert.equal(byStep.busy.status, "started");
    assert.deepEqual(byStep.lost.waits, [{
      kind: "unserved",
      queue: "dw_lost",
      flowSlug: "dw_flow",
      stepSlug: "lost",
      tasks: 1,
    }]);
    assert.equal(byStep.lost.status, "queued", "no worker took it: queued, not started");
    assert.deepEqual(byStep.next.waits, [
      { kind: "queued", queue: "dw_served", liveWorkers: 1, tasks: 1 },
    ]);
    const [later] = byStep.later.waits;
    assert.equal(later.kind, "delayed");
    const [{ vt }] = await sql`select vt from pgmq.q_dw_served m
      join pgflow.step_tasks t on t.message_id = m.msg_id and t.queue_name = 'dw_served'
      where t.step_slug = 'later'`;
    assert.deepEqual(later.kind === "delayed" && [later.until, later.retry], [
      (vt as Date).toISOString(),
      false,
    ]);
    const [backoff] = byStep.again.waits;
    assert.equal(backoff.kind, "delayed");
    assert.equal(backoff.kind === "delayed" && backoff.retry, true, "a retry's backoff");
    assert.ok(
      backoff.kind === "delayed" && Date.parse(backoff.until) > Date.now() + 3000_000,
      JSON.stringify(backoff),
    );
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("a role that may not read the queue table: the run view renders, saying delayed until is unavailable", async ({ sql, connect }) => {
  await defineFlow(sql, "du_flow", [
    { slug: "later", queue: "du_hidden", startDelay: 3600 },
    { slug: "lost", queue: "du_unserved" },
  ], { mode: "routed" });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('du_flow', '{}')`;
  await liveWorker(sql, "du_hidden", [["du_flow", "later"]]);
  // An operator's read-only role: every pgflow table and function, PGMQ's schema, no queue table.
  const role = "du_reader";
  await sql.unsafe(`drop role if exists ${role}`);
  await sql.unsafe(`create role ${role} nologin`);
  await sql.unsafe(`grant usage on schema pgflow, pgmq to ${role};
    grant select on all tables in schema pgflow to ${role};
    grant execute on all functions in schema pgflow to ${role}`);
  const pool = connect({ connection: { options: `-c role=${role}` } });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const [{ allowed }] = await sql`
      select has_table_privilege(${role}, 'pgmq.q_du_hidden', 'select') as allowed`;
    assert.equal(
      allowed,
      false,
      "the role must not read the queue table for this test to mean anything",
    );
    const run = await getRun(dashboard.url, runId);
    const byStep = Object.fromEntries(run.steps.map((s) => [s.stepSlug, s]));
    assert.deepEqual(byStep.later.waits, [{
      kind: "queued",
      queue: "du_hidden",
      liveWorkers: 1,
      tasks: 1,
      delayUnavailable: "this role may not read msg_id and vt of pgmq.q_du_hidden",
    }]);
    assert.deepEqual(byStep.lost.waits, [{
      kind: "unserved",
      queue: "du_unserved",
      flowSlug: "du_flow",
      stepSlug: "lost",
      tasks: 1,
      delayUnavailable: "this role may not read msg_id and vt of pgmq.q_du_unserved",
    }]);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
    await sql.unsafe(`drop owned by ${role}; drop role ${role}`);
  }
});

db.test("a queue table without the visibility column: the run view renders, saying delayed until is unavailable", async ({ sql, url }) => {
  await defineFlow(sql, "dl_flow", [{ slug: "later", queue: "dl_odd", startDelay: 3600 }], {
    mode: "routed",
  });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('dl_flow', '{}')`;
  await liveWorker(sql, "dl_odd", [["dl_flow", "later"]]);
  // Another PGMQ version's layout, as far as this read can tell.
  await sql`alter table pgmq.q_dl_odd rename column vt to visible_at`;
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const run = await getRun(dashboard.url, runId);
    assert.deepEqual(run.steps.find((s) => s.stepSlug === "later")?.waits, [{
      kind: "queued",
      queue: "dl_odd",
      liveWorkers: 1,
      tasks: 1,
      delayUnavailable: "pgmq.q_dl_odd has no msg_id and vt columns",
    }]);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
    await sql`alter table pgmq.q_dl_odd rename column visible_at to vt`;
  }
});

db.test("a failed run's unfinished steps: never taken is not-started with no time, running is stopped at the run's end", async ({ sql, url }) => {
  await defineFlow(sql, "dn_flow", [
    { slug: "boom", queue: "dn_boom" },
    { slug: "idle", queue: "dn_idle" },
    { slug: "slow", queue: "dn_slow" },
  ], { mode: "routed", maxAttempts: 1 });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('dn_flow', '{}')`;
  const w = await liveWorker(sql, "dn_boom", [["dn_flow", "boom"]]);
  const s = await liveWorker(sql, "dn_slow", [["dn_flow", "slow"]]);
  await readAndStart(sql, "dn_slow", s, [["dn_flow", "slow"]], 1);
  const [boom] = await readAndStart(sql, "dn_boom", w, [["dn_flow", "boom"]], 1);
  await sql`select pgflow.fail_task(${runId}::uuid, 'boom', 0, 'no', ${boom.attempt}::int)`;
  const [{ failed_at }] =
    await sql`select failed_at from pgflow.runs where run_id = ${runId}::uuid`;

  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const first = await getRun(dashboard.url, runId);
    assert.equal(first.status, "failed");
    const step = (r: RunDetail, slug: string) => r.steps.find((x) => x.stepSlug === slug)!;
    assert.deepEqual(
      [step(first, "idle").status, step(first, "idle").seconds, step(first, "idle").endedAt],
      ["not-started", null, null],
    );
    assert.equal(step(first, "idle").storedStatus, "started");
    assert.equal(step(first, "slow").status, "stopped");
    assert.equal(step(first, "slow").endedAt, (failed_at as Date).toISOString());
    assert.deepEqual(step(first, "idle").waits, [], "a finished run waits for nothing");
    await new Promise((r) => setTimeout(r, 1100));
    const second = await getRun(dashboard.url, runId);
    assert.equal(step(second, "slow").seconds, step(first, "slow").seconds, "its clock stopped");
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("the run search: by flow, status (cancelled too) and id prefix; bad filters are named", async ({ sql, url }) => {
  await defineFlow(sql, "ds_one", [{ slug: "a" }]);
  await defineFlow(sql, "ds_two", [{ slug: "a" }]);
  const ids: string[] = [];
  for (const flow of ["ds_one", "ds_one", "ds_two"]) {
    const [{ run_id }] = await sql`select run_id::text from pgflow.start_flow(${flow}, '{}')`;
    ids.push(run_id);
  }
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  const search = async (query: string) => {
    const res = await fetch(new URL(`api/runs?${query}`, dashboard.url));
    return { status: res.status, body: await res.json() };
  };
  try {
    const all = await search("limit=200");
    assert.equal(all.status, 200);
    const listed = all.body.map((r: { runId: string }) => r.runId);
    assert.deepEqual(
      listed.filter((id: string) => ids.includes(id)),
      [...ids].reverse(),
      "newest first",
    );
    const one = await search("flow=ds_one");
    assert.deepEqual(
      one.body.map((r: { runId: string }) => r.runId).sort(),
      ids.slice(0, 2).sort(),
    );
    assert.deepEqual((await search("status=failed&flow=ds_one")).body, []);
    await sql`select pgflow.cancel_run(${ids[0]}::uuid, 'test')`;
    const cancelled = await search("status=cancelled&flow=ds_one");
    assert.deepEqual(cancelled.body.map((r: { runId: string }) => r.runId), [ids[0]]);
    assert.ok(cancelled.body[0].seconds < 60, "a cancelled run's time ends when it was cancelled");
    assert.equal((await search("status=started&flow=ds_two")).body[0].runId, ids[2]);
    for (const prefix of [ids[2].slice(0, 6), ids[2].slice(0, 13).toUpperCase(), ids[2]]) {
      const found = await search(`id=${prefix}`);
      assert.deepEqual(found.body.map((r: { runId: string }) => r.runId), [ids[2]], prefix);
    }
    assert.equal((await search("limit=1")).body.length, 1);
    for (
      const [query, message] of [
        [
          "status=done",
          /^status must be one of started, completed, failed, cancelled, got "done"$/,
        ],
        ["id=xyz", /^id must be the start of a run id .*got "xyz"$/],
        ["id=0123456789", /^id must be the start of a run id/],
        ["flow=a%20b", /^flow must be a flow slug .*got "a b"$/],
        ["limit=0", /^limit must be a whole number from 1 to 200, got "0"$/],
      ] as const
    ) {
      const bad = await search(query);
      assert.equal(bad.status, 400, query);
      assert.match(bad.body.error, message);
    }
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

Deno.test("idBounds: the range of run ids a prefix stands for", () => {
  assert.deepEqual(idBounds("0b7e"), [
    "0b7e0000-0000-0000-0000-000000000000",
    "0b7effff-ffff-ffff-ffff-ffffffffffff",
  ]);
  assert.deepEqual(idBounds("0b7e12ab-4"), [
    "0b7e12ab-4000-0000-0000-000000000000",
    "0b7e12ab-4fff-ffff-ffff-ffffffffffff",
  ]);
  for (const bad of ["g", "0b7e12ab4", "-", "0b7e12ab-4c-"]) {
    assert.equal(idBounds(bad), undefined, bad);
  }
});

db.test("the workers panel: live workers per queue, pairs served, heartbeat, tasks in flight", async ({ sql, url }) => {
  await defineFlow(sql, "dk_flow", [{ slug: "a", queue: "dk_q" }, { slug: "b", queue: "dk_q" }], {
    mode: "routed",
  });
  await sql`select pgflow.start_flow('dk_flow', '{}')`;
  const w = await liveWorker(sql, "dk_q", [["dk_flow", "a"], ["dk_flow", "b"]], "dk_fn");
  const silent = await liveWorker(sql, "dk_q", [["dk_flow", "a"]], "dk_fn");
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '5 minutes'
            where worker_id = ${silent}::uuid`;
  await readAndStart(sql, "dk_q", w, [["dk_flow", "a"], ["dk_flow", "b"]], 2);
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const o: Overview = await (await fetch(new URL("api/overview", dashboard.url))).json();
    const mine = o.workers.filter((x) => x.queueName === "dk_q");
    assert.deepEqual(
      mine.map((x) => [x.workerId, x.functionName, x.pairs, x.inFlight, x.deprecated]),
      [[w, "dk_fn", 2, 2, false]],
      "the silent worker is not listed",
    );
    assert.ok(mine[0].heartbeatSeconds < 30);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("actions: no endpoint without --allow-actions; with it, token, same-origin, JSON and Host are required", async ({ sql, url }) => {
  await defineFlow(sql, "da_flow", [{ slug: "a", queue: "da_q" }], { mode: "routed" });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('da_flow', '{}')`;
  const pool = createPool(url, { max: 1 });
  const plain = startDashboard(pool, { port: 0 });
  const lines: string[] = [];
  const acting = startDashboard(pool, { port: 0, allowActions: true, log: (l) => lines.push(l) });
  try {
    // Without the flag: the session says so, and no action path answers.
    assert.deepEqual(await (await fetch(new URL("api/session", plain.url))).json(), {
      actions: false,
    });
    const none = await fetch(new URL(`api/runs/${runId}/cancel`, plain.url), {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "{}",
    });
    assert.equal(none.status, 405);
    await none.body?.cancel();
    const noneGet = await fetch(new URL(`api/runs/${runId}/cancel`, plain.url));
    assert.equal(noneGet.status, 404);
    await noneGet.body?.cancel();

    const session = await (await fetch(new URL("api/session", acting.url))).json();
    assert.equal(session.actions, true);
    assert.match(session.token, /^[0-9a-f]{64}$/);
    assert.equal((await (await fetch(new URL("api/session", plain.url))).json()).token, undefined);
    const base = new URL(acting.url);
    const origin = `http://${base.host}`;
    const good = {
      "content-type": "application/json",
      "x-pgflow-token": session.token,
      origin,
      "sec-fetch-site": "same-origin",
    };
    const post = async (headers: Record<string, string>, action = "cancel", id = runId) => {
      const res = await fetch(new URL(`api/runs/${id}/${action}`, base), {
        method: "POST",
        headers,
        body: JSON.stringify({ reason: "wrong input" }),
      });
      return { status: res.status, body: await res.json() };
    };
    const refused: [Record<string, string>, number, RegExp][] = [
      [{ ...good, "x-pgflow-token": "" }, 403, /missing or wrong x-pgflow-token/],
      [{ ...good, "x-pgflow-token": "0".repeat(64) }, 403, /missing or wrong x-pgflow-token/],
      [{ ...good, origin: "http://evil.example" }, 403, /cross-origin request refused/],
      [{ ...good, origin: "null" }, 403, /cross-origin request refused/],
      [{ ...good, "sec-fetch-site": "cross-site" }, 403, /cross-site request refused/],
      [{ ...good, "sec-fetch-site": "same-site" }, 403, /cross-site request refused/],
      [{ ...good, "content-type": "text/plain" }, 415, /Content-Type: application\/json/],
    ];
    for (const [headers, status, message] of refused) {
      const res = await post(headers);
      assert.equal(res.status, status, JSON.stringify(headers));
      assert.match(res.body.error, message);
    }
    const get = await fetch(new URL(`api/runs/${runId}/cancel`, base));
    assert.equal(get.status, 405);
    assert.equal(get.headers.get("allow"), "POST");
    await get.body?.cancel();
    const rebound = await rawRequest(
      base,
      `evil.example:${base.port}`,
      "POST",
      `/api/runs/${runId}/cancel`,
      {
        "content-type": "application/json",
        "x-pgflow-token": session.token,
      },
    );
    assert.equal(statusOf(rebound), 421);
    assert.equal((await post(good, "cancel", "not-a-uuid")).status, 400);
    const [{ status }] = await sql`select status from pgflow.runs where run_id = ${runId}::uuid`;
    assert.equal(status, "started", "no refused request changed the run");
    assert.equal(lines.length, 0, lines.join("\n"));

    // Accepted: the engine's functions act, and each action is logged on one line.
    const cancelled = await post(good);
    assert.equal(cancelled.status, 200, JSON.stringify(cancelled.body));
    assert.deepEqual(cancelled.body, {
      action: "cancel",
      runId,
      flowSlug: "da_flow",
      status: "cancelled",
      cancelled: true,
    });
    const [after] = await sql`select status, cancel_reason from pgflow.runs
                              where run_id = ${runId}::uuid`;
    assert.deepEqual({ ...after }, { status: "cancelled", cancel_reason: "wrong input" });
    const again = await post(good);
    assert.equal(again.body.cancelled, false, "idempotent: already ended");
    // A client without Origin and Sec-Fetch-Site (curl) still needs the token.
    const retried = await post({
      "content-type": "application/json",
      "x-pgflow-token": session.token,
    }, "retry");
    assert.equal(retried.status, 200, JSON.stringify(retried.body));
    const [lineage] = await sql`select restart_of_run_id::text, restart_mode from pgflow.runs
                                where run_id = ${retried.body.newRunId}::uuid`;
    assert.deepEqual({ ...lineage }, { restart_of_run_id: runId, restart_mode: "retry" });
    const resumed = await post(good, "resume");
    assert.equal(resumed.status, 200, JSON.stringify(resumed.body));
    const started = await post(good, "retry", retried.body.newRunId);
    assert.equal(started.status, 409);
    assert.match(started.body.error, /only failed or cancelled runs/);
    const unknown = await post(good, "retry", crypto.randomUUID());
    assert.equal(unknown.status, 404);
    assert.equal(lines.length, 4, lines.join("\n"));
    assert.match(lines[0], /^pgflow dashboard: cancel run \S+ \(da_flow\): now cancelled$/);
    assert.match(lines[1], /^pgflow dashboard: cancel run \S+ \(da_flow\): already cancelled$/);
    assert.match(lines[2], /^pgflow dashboard: retry run \S+ \(da_flow\): new run \S+$/);
    assert.ok(lines.every((l) => !l.includes("wrong input")), "the reason is not logged");

    // The run view shows the lineage both ways.
    const source = await getRun(acting.url, runId);
    assert.deepEqual(
      source.restartedAs.map((r) => [r.runId, r.mode]).sort(),
      [[retried.body.newRunId, "retry"], [resumed.body.newRunId, "resume"]].sort(),
    );
    const copy = await getRun(acting.url, resumed.body.newRunId);
    assert.deepEqual([copy.restartOf, copy.restartMode], [runId, "resume"]);
  } finally {
    await plain.shutdown();
    await acting.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("the attempt history: each failed attempt with its worker, times, error and stack, then the completion", async ({ sql, url }) => {
  await defineFlow(
    sql,
    "dh_flow",
    [{ slug: "flaky", queue: "dh_q", maxAttempts: 3, baseDelay: 1 }],
    {
      mode: "routed",
    },
  );
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('dh_flow', '{}')`;
  const w = await liveWorker(sql, "dh_q", [["dh_flow", "flaky"]], "dh_fn");
  const [first] = await readAndStart(sql, "dh_q", w, [["dh_flow", "flaky"]], 1);
  await sql`select pgflow.fail_task(${runId}::uuid, 'flaky', 0, 'timeout talking to the bank',
                                    ${first.attempt}::int, 'Error: timeout\n    at charge (bank.ts:3)')`;
  const second = await waitFor(
    async () => (await readAndStart(sql, "dh_q", w, [["dh_flow", "flaky"]], 1))[0],
    { what: "the retry" },
  );
  await sql`select pgflow.complete_task(${runId}::uuid, 'flaky', 0, '"ok"'::jsonb, ${second.attempt}::int)`;
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const run = await getRun(dashboard.url, runId);
    assert.equal(run.status, "completed");
    const history = run.steps[0].history;
    assert.deepEqual(
      history.map((
        a,
      ) => [a.taskIndex, a.attempt, a.outcome, a.workerId, a.functionName, a.error, a.stack]),
      [
        [
          0,
          1,
          "failed",
          w,
          "dh_fn",
          "timeout talking to the bank",
          "Error: timeout\n    at charge (bank.ts:3)",
        ],
        [0, 2, "completed", w, "dh_fn", null, null],
      ],
    );
    assert.ok(history.every((a) => a.startedAt !== null && a.endedAt !== null));
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("a resumed run: its reused steps are marked, and both runs name each other", async ({ sql, url }) => {
  await defineFlow(sql, "dr_flow", [{ slug: "a", queue: "dr_q" }, {
    slug: "b",
    deps: ["a"],
    queue: "dr_q",
  }], { mode: "routed", maxAttempts: 1 });
  const [{ run_id: runId }] =
    await sql`select run_id::text from pgflow.start_flow('dr_flow', '{}')`;
  const w = await liveWorker(sql, "dr_q", [["dr_flow", "a"], ["dr_flow", "b"]]);
  const [a] = await readAndStart(sql, "dr_q", w, [["dr_flow", "a"]], 1);
  await sql`select pgflow.complete_task(${runId}::uuid, 'a', 0, '1'::jsonb, ${a.attempt}::int)`;
  const [b] = await readAndStart(sql, "dr_q", w, [["dr_flow", "b"]], 1);
  await sql`select pgflow.fail_task(${runId}::uuid, 'b', 0, 'no', ${b.attempt}::int)`;
  const [{ run_id: resumed }] =
    await sql`select run_id::text from pgflow.resume_run(${runId}::uuid)`;
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const run = await getRun(dashboard.url, resumed);
    assert.deepEqual([run.restartOf, run.restartMode], [runId, "resume"]);
    assert.deepEqual(run.steps.map((s) => [s.stepSlug, s.status, s.reused]), [
      ["a", "completed", true],
      ["b", "queued", false],
    ]);
    assert.deepEqual(run.steps[1].waits, [
      { kind: "queued", queue: "dr_q", liveWorkers: 1, tasks: 1 },
    ]);
    const source = await getRun(dashboard.url, runId);
    assert.deepEqual(source.restartedAs.map((r) => [r.runId, r.mode, r.status]), [
      [resumed, "resume", "started"],
    ]);
    // The lists say so too: the source's row in the search and its failure name the resume.
    const listed: RunSearchRow[] =
      await (await fetch(new URL("api/runs?flow=dr_flow", dashboard.url)))
        .json();
    assert.deepEqual(
      listed.map((r) => [r.runId, r.restartOf, r.restartedAs.map((x) => [x.runId, x.mode])]),
      [[resumed, runId, []], [runId, null, [[resumed, "resume"]]]],
    );
    const o: Overview = await (await fetch(new URL("api/overview", dashboard.url))).json();
    assert.deepEqual(
      o.failures.filter((f) => f.flowSlug === "dr_flow").map((
        f,
      ) => [f.runId, f.stepSlug, f.restartedAs.map((x) => x.runId)]),
      [[runId, "b", [resumed]]],
    );
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("the aliases panel: each alias, the version it starts, its other versions", async ({ sql, url }) => {
  await compileNow(
    sql,
    new Flow({ slug: "dal_v1", alias: "dal_triage" }).step({ slug: "a" }, () => 1),
    new Flow({ slug: "dal_v2", alias: "dal_triage" }).step({ slug: "a" }, () => 1)
      .step({ slug: "b", dependsOn: ["a"] }, () => 2),
  );
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const o: Overview = await (await fetch(new URL("api/overview", dashboard.url))).json();
    const mine = o.aliases.filter((a) => a.alias === "dal_triage");
    assert.deepEqual(mine.map((a) => [a.alias, a.flowSlug, a.versions]), [
      ["dal_triage", "dal_v1", ["dal_v1", "dal_v2"]],
    ]);
    assert.match(mine[0].updatedAt, /^\d{4}-\d\d-\d\dT/);
    const page = await (await fetch(dashboard.url)).text();
    assert.match(page, /<section id="aliases"[^>]*><h2>Aliases<\/h2>/);
    const script = await (await fetch(new URL("js/panels.js", dashboard.url))).text();
    assert.match(script, /renderAliases\(o\)/);
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});

db.test("the run view shows a step whose task waits for a concurrency limit as waiting, with since when and why", async ({ sql, url }) => {
  await limitedFlow(sql, "dw_cc", "dw_cc_q", 1);
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const [r] =
      await sql`select run_id::text from pgflow.start_flow('dw_cc', '{"channel":"C042"}')`;
    ids.push(r.run_id);
  }
  const pool = createPool(url, { max: 1 });
  const dashboard = startDashboard(pool, { port: 0 });
  try {
    const [released] = (await getRun(dashboard.url, ids[0])).steps;
    assert.equal(released.status, "queued");
    assert.equal(released.waits[0].kind, "unserved");
    const [held] = (await getRun(dashboard.url, ids[1])).steps;
    assert.equal(held.status, "waiting");
    assert.equal(held.waits.length, 1, JSON.stringify(held.waits));
    const [wait] = held.waits;
    assert.equal(wait.kind, "capacity");
    assert.ok(wait.kind === "capacity" && !Number.isNaN(Date.parse(wait.since)));
    assert.deepEqual({ ...wait, since: "" }, {
      kind: "capacity",
      since: "",
      reason: "concurrency dw_cc/s key C042: 1 of 1 in flight",
      tasks: 1,
    });
  } finally {
    await dashboard.shutdown();
    await pool.end({ timeout: 5 });
  }
});
