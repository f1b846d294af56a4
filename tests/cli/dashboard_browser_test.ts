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
import { defineFlow } from "../support/engine.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
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

let release: () => void = () => {};
const hanging = new Promise<void>((resolve) => (release = resolve));
const stuck = new Flow<{ n: number }>({ slug: "dash_stuck", timeout: 3 })
  .step({ slug: "hang" }, async () => {
    await hanging;
    return "released";
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
    await startWorker(workers, stuck, { connectionString: url });
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
    await waitFor(
      async () =>
        (await sql`select 1 from pgflow.step_tasks where run_id = ${stuckRun}::uuid
                   and status = 'started'`).length > 0,
      { what: "the hanging task to start" },
    );

    dashboard = await startDashboardCli(["--database-url", url, "--stuck-after", "2"]);
    assert.match(dashboard.pageUrl, /^http:\/\/127\.0\.0\.1:\d+\/$/, dashboard.stderr());
    const page = await browser.goto(`${dashboard.pageUrl}#run=${okRun}`);

    // Queues: depth, live workers and coverage of the shared queue with one unsupported message.
    await page.waitFor(`document.body.dataset.refreshes >= 1`, "the first refresh");
    const queues = await panel(page, "queues");
    assert.match(queues, /^dash_shared\t1\t\d\t\S+ s\t1\t1 MISSING, 1 (ok|idle)\t$/m, queues);
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
    assert.match(runs, /^dash_ok\t0\t1\t0$/m, runs);
    assert.match(runs, /^dash_fail\t0\t0\t1$/m, runs);
    assert.match(runs, /^dash_stuck\t1\t0\t0$/m, runs);
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
      ["/dashboard.js"],
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
    release();
    await browser.close();
    if (dashboard !== undefined) {
      const code: number = await dashboard.stop();
      assert.equal(code, 0, `dashboard exit on SIGTERM\n${dashboard.stderr()}`);
    }
    await stopAll(workers);
  }
});
