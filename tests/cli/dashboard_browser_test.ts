/**
 * `pgflow dashboard` in a real browser (headless Chromium over DevTools): the command serves a
 * database with real workers and runs — completed, failed with an error, a task stuck past its
 * timeout, a message no worker on its shared queue supports — and the page shows what a person
 * would look for: the numbers, the failed step's error, one run's DAG with its step states. Values
 * holding markup (a step output, an error) show as text and run nothing; the page refreshes by
 * itself; a screenshot is saved under tests/artifacts/.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { openBrowser, type Page } from "../support/browser.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { testDatabase } from "../support/db.ts";
import { runRow, startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { type DashboardProcess, startDashboardCli } from "./dashboard_cli.ts";

const db = testDatabase(import.meta.url);

const OUTPUT_XSS = `<script>window.__pwned = "output script"</script>` +
  `<img src=x onerror="window.__pwned = 'output img'">`;
const ERROR_XSS = `card declined <img src=x onerror="window.__pwned = 'error img'">`;

const ok = new Flow<{ n: number }>({ slug: "dash_ok" })
  .step({ slug: "fetch" }, (input) => ({ n: input.n }))
  .step({ slug: "left", dependsOn: ["fetch"] }, () => ({ html: OUTPUT_XSS }))
  .step({ slug: "right", dependsOn: ["fetch"] }, (deps) => deps.fetch.n * 2)
  .step({ slug: "join", dependsOn: ["left", "right"] }, (deps) => deps.right + 1);

const failing = new Flow<{ n: number }>({ slug: "dash_fail", maxAttempts: 1 })
  .step({ slug: "validate" }, () => true)
  .step({ slug: "charge", dependsOn: ["validate"] }, () => {
    throw new Error(ERROR_XSS);
  });

const sharedA = new Flow<{ n: number }>({ slug: "dash_shared_a" })
  .step({ slug: "work" }, () => "done");

const ARTIFACTS = new URL("../artifacts/", import.meta.url);

/** Text of one panel as rendered (innerText: what is visible, cells tab-separated). */
function panel(page: Page, id: string): Promise<string> {
  return page.evaluate<string>(`document.querySelector("#${id} .body").innerText`);
}

db.test("the dashboard shows queues, runs, failures, stuck tasks and a run's DAG in a browser", async ({ sql, url }) => {
  const started = performance.now();
  const workers: FlowWorker[] = [];
  let dashboard: DashboardProcess | undefined;
  const browser = await openBrowser();
  try {
    await startWorker(workers, ok, { connectionString: url });
    await startWorker(workers, failing, { connectionString: url });
    // Stuck past its timeout: a task whose worker claimed it and went silent (a live worker
    // aborts a handler at its timeout), so it is claimed here and never reported.
    await defineFlow(sql, "dash_stuck", [{ slug: "hang" }], { timeout: 3 });
    await startWorker(workers, [routeFlow(sharedA, { queues: { work: "dash_shared" } })], {
      queueName: "dash_shared",
      connectionString: url,
    });
    // A second flow on the shared queue that no running worker has a handler for.
    await defineFlow(sql, "dash_shared_b", [{ slug: "work", queue: "dash_shared" }], {
      mode: "routed",
    });

    const okRun = await startRun(sql, "dash_ok", { n: 20 });
    const failRun = await startRun(sql, "dash_fail", { n: 1 });
    const stuckRun = await startRun(sql, "dash_stuck", { n: 2 });
    const sharedRun = await startRun(sql, "dash_shared_b", { n: 3 });
    assert.equal((await waitForRun(sql, okRun)).status, "completed");
    assert.equal((await waitForRun(sql, failRun)).status, "failed");
    const silent = await registerWorker(sql, "dash_stuck");
    assert.equal(
      (await readAndStart(sql, "dash_stuck", silent, [["dash_stuck", "hang"]])).length,
      1,
    );

    dashboard = await startDashboardCli(["--database-url", url, "--stuck-after", "2"]);
    assert.match(dashboard.pageUrl, /^http:\/\/127\.0\.0\.1:\d+\/$/, dashboard.stderr());
    const page = await browser.goto(`${dashboard.pageUrl}#run=${okRun}`);

    // Queues: depth, live workers and coverage of the shared queue with one unsupported message.
    await page.waitFor(`document.body.dataset.refreshes >= 1`, "the first refresh");
    const queues = await panel(page, "queues");
    assert.match(queues, /^dash_shared\t1\t\d\t\S+ s\t1\t1 MISSING, 1 (ok|idle)\t/m, queues);
    assert.match(queues, /^dash_ok\t0\t0\t-\t1\t/m, queues);
    assert.equal(
      await page.evaluate(`document.querySelectorAll("#queues svg.spark").length`),
      (await sql`select 1 from pgmq.list_queues()`).length,
      "a sparkline per queue",
    );
    const coverage = await panel(page, "coverage");
    assert.match(
      coverage,
      /^dash_shared\tdash_shared_b\twork\t1\t0\t(-|0)\t0\tMISSING$/m,
      coverage,
    );

    // Runs by flow, and the failure with its error as the operator wrote it.
    const runs = await panel(page, "runs");
    assert.match(runs, /^dash_ok\t0\t1\t0\t0$/m, runs);
    assert.match(runs, /^dash_fail\t0\t0\t1\t0$/m, runs);
    assert.match(runs, /^dash_stuck\t1\t0\t0\t0$/m, runs);
    // Started without --allow-actions: no button anywhere, and the page knows why.
    assert.equal(await page.evaluate(`document.body.dataset.actions`), "false");
    const failures = await panel(page, "failures");
    assert.ok(
      failures.includes(`dash_fail\tcharge\t${failRun.slice(0, 8)}\t${ERROR_XSS}`),
      failures,
    );

    // Stuck: the hanging task once past its 3 s timeout, and the unsupported message's task
    // queued for more than --stuck-after 2.
    const stuckText = await page.waitFor<string>(
      `(t => /past timeout/.test(t) && /queued too long/.test(t) && t)(
         document.querySelector("#stuck .body").innerText)`,
      "both stuck tasks",
    );
    assert.match(stuckText, /^past timeout\tdash_stuck\thang\t0\tdash_stuck\t\S+ s\t3\.0 s\t/m);
    assert.match(stuckText, /^queued too long\tdash_shared_b\twork\t0\tdash_shared\t/m);
    assert.deepEqual(
      await page.evaluate(`[...document.querySelectorAll("#stuck tr[data-run]")].map(
        tr => tr.dataset.run).sort()`),
      [stuckRun, sharedRun].sort(),
    );

    // The DAG of the run named in the address: each step, its state, the edges between them.
    const nodes = await page.waitFor<[string, string, string][]>(
      `(n => n.length && n)([...document.querySelectorAll("#run svg.dag g.node")].map(
         g => [g.dataset.step, g.dataset.status, g.querySelector("text").textContent]))`,
      "the run's DAG",
    );
    assert.deepEqual(nodes, [
      ["fetch", "completed", "fetch"],
      ["left", "completed", "left"],
      ["right", "completed", "right"],
      ["join", "completed", "join"],
    ]);
    assert.equal(
      await page.evaluate(`document.querySelectorAll("#run svg.dag path.edge").length`),
      4,
    );
    const columns = await page.evaluate<number[]>(
      `[...document.querySelectorAll("#run svg.dag g.node")].map(
         g => Number(/translate\\(([\\d.]+)/.exec(g.getAttribute("transform"))[1]))`,
    );
    assert.ok(columns[0] < columns[1] && columns[1] === columns[2] && columns[2] < columns[3]);
    const runPanel = await panel(page, "run");
    assert.match(runPanel, new RegExp(`run ${okRun}`));
    assert.match(runPanel, /^join\tsingle\tcompleted\t1\t1\t\S+\t\S+\t\S+ s\t\t41$/m, runPanel);

    // Markup in values is text: shown literally, no element made, nothing ran.
    assert.ok(runPanel.includes(`{"html": ${JSON.stringify(OUTPUT_XSS)}}`), runPanel);
    assert.equal(await page.evaluate(`typeof window.__pwned`), "undefined");
    assert.equal(await page.evaluate(`document.querySelectorAll("img").length`), 0);
    assert.deepEqual(
      await page.evaluate(`[...document.scripts].map(s => s.getAttribute("src"))`),
      ["/js/main.js"],
    );

    // It refreshes by itself: a new run appears without a reload.
    await page.evaluate(`window.__sameDocument = true`);
    const newRun = await startRun(sql, "dash_ok", { n: 1 });
    await page.waitFor(
      `document.querySelector("#recent .body").innerText.includes(${
        JSON.stringify(newRun.slice(0, 8))
      })`,
      "the new run in Recent runs",
    );
    assert.equal(await page.evaluate(`window.__sameDocument`), true, "no reload happened");

    // Clicking a run shows its DAG: the failed run, its failed step and error.
    await page.evaluate(`document.querySelector('#recent tr[data-run="${failRun}"]').click()`);
    const failedNodes = await page.waitFor<string[][]>(
      `(n => n.length === 2 && n)([...document.querySelectorAll("#run svg.dag g.node")].map(
         g => [g.dataset.step, g.dataset.status]))`,
      "the failed run's DAG",
    );
    assert.deepEqual(failedNodes, [["validate", "completed"], ["charge", "failed"]]);
    assert.equal(await page.evaluate(`location.hash`), `#run=${failRun}`);
    const failedPanel = await panel(page, "run");
    assert.ok(failedPanel.includes(ERROR_XSS), failedPanel);
    assert.equal(await page.evaluate(`typeof window.__pwned`), "undefined");

    assert.equal(await page.evaluate(`document.querySelectorAll("button.action").length`), 0);

    const problems = page.messages.filter((m) =>
      /exception|error|Content Security Policy/i.test(m)
    );
    assert.deepEqual(problems, [], "no script errors and no blocked content");

    await Deno.mkdir(ARTIFACTS, { recursive: true });
    const shot = new URL("dashboard.png", ARTIFACTS).pathname;
    await page.evaluate(`location.hash = "run=${okRun}"`);
    await page.waitFor(
      `document.querySelectorAll('#run svg.dag g.node[data-step="join"]').length === 1`,
      "the completed run again",
    );
    await page.screenshot(shot);
    assert.ok((await Deno.stat(shot)).size > 10_000, "a real picture");
    console.log(
      `screenshot: ${shot} (test took ${((performance.now() - started) / 1000).toFixed(1)} s)`,
    );
  } finally {
    await browser.close();
    if (dashboard !== undefined) {
      const code: number = await dashboard.stop();
      assert.equal(code, 0, `dashboard exit on SIGTERM\n${dashboard.stderr()}`);
    }
    await stopAll(workers);
  }
});

/** Points where an edge of the run's DAG passes inside a box that is not one of its two ends. */
const EDGE_OVER_BOX = `(() => {
  const boxes = [...document.querySelectorAll("#run svg.dag g.node")].map((g) => {
    const [x, y] = /translate\\(([\\d.]+),([\\d.]+)\\)/.exec(g.getAttribute("transform"))
      .slice(1).map(Number);
    const r = g.querySelector("rect");
    return { step: g.dataset.step, x, y, w: Number(r.getAttribute("width")),
      h: Number(r.getAttribute("height")) };
  });
  const hits = [];
  for (const path of document.querySelectorAll("#run svg.dag path.edge")) {
    const total = path.getTotalLength();
    for (let at = 0; at <= total; at += 2) {
      const p = path.getPointAtLength(at);
      for (const b of boxes) {
        if (b.step === path.dataset.from || b.step === path.dataset.to) continue;
        if (p.x > b.x + 1 && p.x < b.x + b.w - 1 && p.y > b.y + 1 && p.y < b.y + b.h - 1) {
          hits.push(path.dataset.from + "->" + path.dataset.to + " under " + b.step);
          break;
        }
      }
    }
  }
  return [...new Set(hits)];
})()`;

/** Sections whose content is wider than the section (cut off or scrolled) at this width. */
const CUT_OFF = `[...document.querySelectorAll("main > section")].filter((s) =>
  s.scrollWidth > s.clientWidth + 1 || s.getBoundingClientRect().right > window.innerWidth
).map((s) => s.id + " " + s.scrollWidth + ">" + s.clientWidth)`;

db.test("in a browser with --allow-actions: search, a run's waits and attempts, cancel and retry it; the layout at 1400 px", async ({ sql, url }) => {
  // Long names, as real flows have them: the panels must still fit 1400 px.
  const longQueue = "dash_browser_queue_for_customer_records_xyz";
  await defineFlow(sql, "dash_browser_customer_onboarding", [
    { slug: "fetch_customer_record", queue: longQueue, maxAttempts: 3, baseDelay: 3600 },
    { slug: "ship_welcome_pack", queue: "dash_unserved_shipping_queue" },
    { slug: "middle", deps: ["fetch_customer_record"], queue: longQueue },
    { slug: "finish", deps: ["fetch_customer_record", "middle"], queue: longQueue },
  ], { mode: "routed" });
  await defineFlow(sql, "dash_two", [
    { slug: "boom", queue: "dash_two_boom" },
    { slug: "idle", queue: "dash_two_idle" },
  ], { mode: "routed", maxAttempts: 1 });
  const flow = "dash_browser_customer_onboarding";
  const [{ run_id: runId }] = await sql`select run_id::text from pgflow.start_flow(${flow}, '{}')`;
  const other = await startRun(sql, flow, { other: true });
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}::uuid, ${longQueue}, 'dash_browser_function',
    ${sql.json([[flow, "fetch_customer_record"], [flow, "middle"], [flow, "finish"]])})`;
  // The first attempt fails with a stack; the retry waits out its hour of backoff.
  const claimed = await readAndStart(sql, longQueue, worker, [[flow, "fetch_customer_record"]], 2);
  for (const c of claimed) {
    await sql`select pgflow.fail_task(${c.run_id}::uuid, 'fetch_customer_record', 0,
      'crm answered 503', ${c.attempt}::int, ${"Error: crm answered 503\n    at fetchCustomer (crm.ts:12:9)"})`;
  }
  // A failed run whose other root step no worker ever took.
  const [{ run_id: failedRun }] =
    await sql`select run_id::text from pgflow.start_flow('dash_two', '{}')`;
  const boomer = crypto.randomUUID();
  await sql`select pgflow.register_worker(${boomer}::uuid, 'dash_two_boom', 'dash_two_fn',
    ${sql.json([["dash_two", "boom"]])})`;
  const [boom] = await readAndStart(sql, "dash_two_boom", boomer, [["dash_two", "boom"]], 1);
  await sql`select pgflow.fail_task(${failedRun}::uuid, 'boom', 0, 'no', ${boom.attempt}::int)`;

  const dashboard = await startDashboardCli([
    "--database-url",
    url,
    "--allow-actions",
    "--stuck-after",
    "1",
    "--stale-after",
    "600",
  ]);
  const browser = await openBrowser();
  try {
    assert.match(dashboard.stderr(), /actions allowed: cancel, retry, resume/);
    const page = await browser.goto(dashboard.pageUrl);
    await page.waitFor(`document.body.dataset.refreshes >= 2`, "two refreshes");
    assert.equal(await page.evaluate(`document.body.dataset.actions`), "true");

    // Nothing cut off at 1400 px, with the stuck panel listing the long-named tasks.
    assert.equal(await page.evaluate(`window.innerWidth`), 1400);
    await page.waitFor(
      `document.querySelector("#stuck .body").innerText.includes("queued too long")`,
      "stuck tasks",
    );
    assert.deepEqual(await page.evaluate(CUT_OFF), [], "no panel wider than the page");

    // The sparkline has a scale: its highest value and 0.
    const scales = await page.evaluate<[string, string, string][]>(
      `[...document.querySelectorAll("#queues tr[data-queue]")].map((tr) => [tr.dataset.queue,
         tr.querySelector("svg.spark text.max").textContent,
         tr.querySelector("svg.spark text.zero").textContent])`,
    );
    assert.deepEqual(scales.find((s) => s[0] === "dash_unserved_shipping_queue"), [
      "dash_unserved_shipping_queue",
      "2",
      "0",
    ]);
    // The workers panel: the live workers, their function, pairs served and tasks in flight.
    const workers = await panel(page, "workers");
    assert.match(
      workers,
      new RegExp(
        `^${longQueue}\tdash_browser_function\t${worker.slice(0, 8)}\t3\t\\S+ s ago\t0\t`,
        "m",
      ),
      workers,
    );

    // Search: by status and the start of the run id, then open the run.
    await page.evaluate(`(() => {
      document.getElementById("f-status").value = "started";
      const id = document.getElementById("f-id");
      id.value = ${JSON.stringify(runId.slice(0, 9))};
      id.dispatchEvent(new Event("input", { bubbles: true }));
    })()`);
    const found = await page.waitFor<string[]>(
      `(r => r.length === 1 && r)([...document.querySelectorAll("#recent tr[data-run]")].map(
         tr => tr.dataset.run))`,
      "the search to find one run",
    );
    assert.deepEqual(found, [runId]);
    await page.evaluate(`document.querySelector('#recent tr[data-run="${runId}"]').click()`);

    // Why each step waits, and the attempt that failed with its stack.
    const why = await page.waitFor<Record<string, string>>(
      `(rows => rows.length === 4 && Object.fromEntries(rows))(
         [...document.querySelectorAll("#run .body > table tr[data-step]")].map(
           tr => [tr.dataset.step, tr.cells[8].innerText]))`,
      "the run's steps",
    );
    assert.match(
      why.fetch_customer_record,
      /^delayed until \d\d:\d\d:\d\d\.\d{3} \(retry backoff\)$/,
    );
    assert.equal(
      why.ship_welcome_pack,
      `queued on dash_unserved_shipping_queue: no live worker serves ${flow}/ship_welcome_pack`,
    );
    assert.equal(why.middle, "waiting for dependencies: fetch_customer_record");
    assert.equal(why.finish, "waiting for dependencies: fetch_customer_record, middle");
    const attempt = await page.evaluate<string[]>(
      `(tr => [tr.dataset.outcome, tr.innerText])(document.querySelector(
         '#run .attempts tr[data-step="fetch_customer_record"][data-attempt="1"]'))`,
    );
    assert.equal(attempt[0], "failed");
    assert.match(
      attempt[1],
      new RegExp(`^0\t1\tfailed\t${worker.slice(0, 8)} \\(dash_browser_function\\)\t`),
    );
    assert.match(attempt[1], /crm answered 503/);
    await page.evaluate(`document.querySelector('#run .attempts details.stack summary').click()`);
    assert.match(
      await page.evaluate<string>(
        `document.querySelector("#run .attempts details.stack pre").innerText`,
      ),
      /at fetchCustomer \(crm\.ts:12:9\)/,
    );
    // The edge fetch_customer_record -> finish skips a column: it must not run under "middle".
    assert.deepEqual(await page.evaluate(EDGE_OVER_BOX), [], "no edge under an unrelated box");
    assert.equal(
      await page.evaluate(`document.querySelectorAll("#run svg.dag path.edge").length`),
      3,
    );

    // Cancel: the button asks first; Back does nothing, Confirm cancels.
    assert.deepEqual(
      await page.evaluate(
        `[...document.querySelectorAll("#run button.action")].map(b => b.dataset.action)`,
      ),
      ["cancel"],
    );
    await page.evaluate(`document.querySelector('#run button[data-action="cancel"]').click()`);
    assert.match(
      await page.evaluate<string>(`document.getElementById("confirm-text").textContent`),
      new RegExp(`^Cancel run ${runId} of ${flow}\\?`),
    );
    await page.evaluate(`document.getElementById("confirm-no").click()`);
    assert.equal(await page.evaluate(`document.getElementById("confirm").hidden`), true);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await runRow(sql, runId)).status, "started", "Back cancels nothing");
    await page.evaluate(`document.querySelector('#run button[data-action="cancel"]').click()`);
    await page.evaluate(`(() => {
      document.getElementById("confirm-reason").value = "wrong customer";
      document.getElementById("confirm-yes").click();
    })()`);
    await page.waitFor(
      `document.querySelector("#run .run-head .badge").textContent === "cancelled"`,
      "the run shown as cancelled",
    );
    assert.equal((await runRow(sql, runId)).status, "cancelled");
    assert.match(await panel(page, "run"), /cancelled: wrong customer/);
    assert.equal((await runRow(sql, other)).status, "started", "the other run is untouched");

    // Retry: confirmed, the page opens the new run, which names its source.
    await page.waitFor(`document.querySelector('#run button[data-action="retry"]')`, "Retry");
    await page.evaluate(`document.querySelector('#run button[data-action="retry"]').click()`);
    await page.evaluate(`document.getElementById("confirm-yes").click()`);
    const newRun = await page.waitFor<string>(
      `(h => h !== ${JSON.stringify(`#run=${runId}`)} && h.slice(5))(location.hash)`,
      "the new run opened",
    );
    const [lineage] = await sql`select restart_of_run_id::text as source, restart_mode, status
                                from pgflow.runs where run_id = ${newRun}::uuid`;
    assert.deepEqual({ ...lineage }, { source: runId, restart_mode: "retry", status: "started" });
    await page.waitFor(
      `(p => p && p.innerText === ${JSON.stringify(`retry of run ${runId.slice(0, 8)}`)})(
         document.querySelector("#run .restart-of"))`,
      "the new run's lineage",
    );
    // The source names what was made from it, and a second retry is told about the first.
    await page.evaluate(`location.hash = "run=${runId}"`);
    await page.waitFor(
      `(p => p && p.innerText === ${
        JSON.stringify(`retried as run ${newRun.slice(0, 8)} (started)`)
      })(document.querySelector("#run .restarted-as"))`,
      "the source's lineage",
    );
    await page.evaluate(`document.querySelector('#run button[data-action="retry"]').click()`);
    assert.match(
      await page.evaluate<string>(`document.getElementById("confirm-text").textContent`),
      new RegExp(
        `It was retried already, as run ${newRun} \\(started\\); this starts one more\\.$`,
      ),
    );
    await page.evaluate(`document.getElementById("confirm-no").click()`);
    await page.evaluate(`location.hash = "run=${newRun}"`);
    await page.waitFor(
      `document.querySelector("#recent .body").innerText.includes(${
        JSON.stringify(newRun.slice(0, 8))
      })
       || (document.getElementById("f-status").value = "", document.getElementById("f-id").value = "",
           document.getElementById("f-id").dispatchEvent(new Event("input", { bubbles: true })), false)`,
      "the new run in the search results",
    );

    // A failed run's step that no worker took: not-started, no time, not a running clock.
    await page.evaluate(`location.hash = "run=${failedRun}"`);
    const idle = await page.waitFor<string[]>(
      `(tr => tr && [tr.dataset.status, tr.cells[7].innerText])(
         document.querySelector('#run .body > table tr[data-step="idle"]'))`,
      "the failed run",
    );
    assert.deepEqual(idle, ["not-started", "-"]);
    assert.equal(
      await page.evaluate(
        `document.querySelector('#run svg.dag g.node[data-step="idle"]').dataset.status`,
      ),
      "not-started",
    );

    const problems = page.messages.filter((m) =>
      /exception|error|Content Security Policy/i.test(m)
    );
    assert.deepEqual(problems, [], "no script errors and no blocked content");
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await page.evaluate(`location.hash = "run=${runId}"`);
    await page.waitFor(
      `document.querySelectorAll("#run .attempts tr[data-attempt]").length > 0`,
      "the run",
    );
    await page.screenshot(new URL("dashboard_actions.png", ARTIFACTS).pathname);
  } finally {
    await browser.close();
    const code: number = await dashboard.stop();
    assert.equal(code, 0, `dashboard exit on SIGTERM\n${dashboard.stderr()}`);
  }
});
