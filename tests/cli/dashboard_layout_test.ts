/**
 * The dashboard as a person reads it, in headless Chromium at 1400 and at 1024 px: every header
 * sits over its column's values (numbers right, the rest left); no name, time or number breaks
 * inside a word; a run opened by `#run=<id>` or a click is scrolled into view, and a refresh does
 * not move the page; a skipped step's reason is neutral, not an error's red; a map's box holds its
 * text and counts attempts per task; a failed run that was retried or resumed says so in the lists.
 * Screenshots at both widths are saved under tests/artifacts/.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { openBrowser, type Page } from "../support/browser.ts";
import { defineFlow } from "../support/engine.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "../worker/helpers.ts";
import { type DashboardProcess, startDashboardCli } from "./dashboard_cli.ts";

const db = testDatabase(import.meta.url);

const RECEIPT_ERROR = "the mail service refused the receipt: 550 5.1.1 mailbox unavailable for " +
  "the address on the order; correct the customer's address, then retry the run";

// Names as the trial that found these defects had them.
const order = new Flow<{ n: number }>({ slug: "order_v2", maxAttempts: 1 })
  .step({ slug: "validate" }, () => true)
  .step({ slug: "sendReceipt", dependsOn: ["validate"] }, () => {
    throw new Error(RECEIPT_ERROR);
  });

const fulfil = new Flow<{ vip: boolean; items: string[] }>({ slug: "fulfil_v2" })
  .array({ slug: "lineItems" }, (input) => input.items)
  .map({ slug: "chargeEachLineItemOnTheCustomerCard", array: "lineItems" }, (item) => item.length)
  .step({ slug: "notifyVipSuccessTeam", if: { vip: true } }, () => "sent")
  .step({ slug: "ship", dependsOn: ["chargeEachLineItemOnTheCustomerCard"] }, () => "shipped");

const ARTIFACTS = new URL("../artifacts/", import.meta.url);
/** How long a run may take to end on a busy machine (a bound, not an expectation). */
const RUN_WAIT_MS = 60_000;
const RED = "rgb(207, 34, 46)";

/** Columns whose header is not aligned with its values: side and distance, per panel. */
const MISALIGNED = `(() => {
  const box = (cell) => {
    const r = document.createRange();
    r.selectNodeContents(cell);
    return r.getBoundingClientRect();
  };
  const bad = new Set();
  for (const table of document.querySelectorAll("main table")) {
    const heads = [...table.tHead.rows[0].cells];
    for (const row of table.tBodies[0].rows) {
      [...row.cells].forEach((td, i) => {
        const th = heads[i];
        if (!th || !td.textContent.trim()) return;
        const right = getComputedStyle(td).textAlign === "right";
        const h = box(th), c = box(td);
        const off = right ? Math.abs(h.right - c.right) : Math.abs(h.left - c.left);
        if (off > 1.5) {
          bad.add(table.closest("section").id + ": " + th.textContent + " (values " +
            (right ? "right" : "left") + "-aligned, header " + Math.round(off) + " px off)");
        }
      });
    }
  }
  return [...bad];
})()`;

/** Text in table cells broken across lines other than at a space (errors and outputs aside). */
const BROKEN_WORDS = `(() => {
  const bad = new Set();
  const r = document.createRange();
  for (const cell of document.querySelectorAll("main td, main th")) {
    const walk = document.createTreeWalker(cell, NodeFilter.SHOW_TEXT);
    for (let t = walk.nextNode(); t; t = walk.nextNode()) {
      if (t.parentElement.closest(".error-text, .output, pre")) continue;
      const s = t.textContent;
      let top = null;
      for (let i = 0; i < s.length; i++) {
        r.setStart(t, i);
        r.setEnd(t, i + 1);
        const rect = r.getClientRects()[0];
        if (!rect || !rect.width) continue;
        if (top !== null && rect.top > top + 2 && !/\\s/.test(s[i - 1]) && !/\\s/.test(s[i])) {
          bad.add(cell.closest("section").id + ": " + s.slice(0, i) + "/" + s.slice(i));
        }
        top = rect.top;
      }
    }
  }
  return [...bad];
})()`;

/** Text of the run's graph that runs out of its box. */
const OVERFLOWING_NODES = `[...document.querySelectorAll("#run svg.dag g.node")].flatMap((g) => {
  const w = Number(g.querySelector("rect").getAttribute("width"));
  return [...g.querySelectorAll("text")].filter((t) => {
    const b = t.getBBox();
    return b.x < 0 || b.x + b.width > w;
  }).map((t) => g.dataset.step + ": " + t.textContent + " (" + Math.round(t.getBBox().width) +
    " px in a " + w + " px box)");
})`;

/** Sections whose content is wider than the section (cut off or scrolled) at this width. */
const CUT_OFF = `[...document.querySelectorAll("main > section")].filter((s) =>
  s.scrollWidth > s.clientWidth + 1 || s.getBoundingClientRect().right > window.innerWidth
).map((s) => s.id + " " + s.scrollWidth + ">" + s.clientWidth)`;

/**
 * Whether the Run panel was brought into view: its top in the upper half of the window, or, when
 * the page ends too soon for that, in the window with the page scrolled to its end.
 */
const RUN_PANEL_SHOWN = `(top => top >= -1 && (top < innerHeight / 2 ||
  (top < innerHeight && scrollY + innerHeight >= document.documentElement.scrollHeight - 1)))(
  document.getElementById("run").getBoundingClientRect().top)`;

function stepRow(page: Page, step: string): Promise<string[]> {
  return page.evaluate<string[]>(`[...document.querySelector(
    '#run .body > table tr[data-step="${step}"]').cells].map((c) => c.innerText)`);
}

db.test("the dashboard's layout and marks at 1400 and 1024 px", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  let dashboard: DashboardProcess | undefined;
  const browser = await openBrowser();
  try {
    // A backlog of runs no worker takes, older than the rest: the Runs list is long.
    await defineFlow(sql, "backlog_v2", [{ slug: "wait" }]);
    const backlog: string[] = [];
    for (let i = 0; i < 55; i++) backlog.push(await startRun(sql, "backlog_v2", { i }));

    await startWorker(workers, order, { connectionString: url });
    await startWorker(workers, fulfil, { connectionString: url });
    const retried = await startRun(sql, "order_v2", { n: 1 });
    const resumed = await startRun(sql, "order_v2", { n: 2 });
    const fulfilRun = await startRun(sql, "fulfil_v2", { vip: false, items: ["mug", "tee"] });
    assert.equal((await waitForRun(sql, retried, RUN_WAIT_MS)).status, "failed");
    assert.equal((await waitForRun(sql, resumed, RUN_WAIT_MS)).status, "failed");
    assert.equal((await waitForRun(sql, fulfilRun, RUN_WAIT_MS)).status, "completed");
    const [{ id: retry }] =
      await sql`select run_id::text as id from pgflow.retry_run(${retried}::uuid)`;
    const [{ id: resume }] =
      await sql`select run_id::text as id from pgflow.resume_run(${resumed}::uuid)`;
    await waitForRun(sql, retry, RUN_WAIT_MS);
    await waitForRun(sql, resume, RUN_WAIT_MS);

    dashboard = await startDashboardCli(["--database-url", url]);
    const page = await browser.goto(`${dashboard.pageUrl}#run=${fulfilRun}`);
    const problems: Record<string, unknown> = {};
    const expect = (what: string, actual: unknown, wanted: unknown) => {
      try {
        assert.deepEqual(actual, wanted);
      } catch {
        problems[what] = actual;
      }
    };

    for (const [width, height] of [[1400, 1000], [1024, 768]]) {
      await page.setViewport(width, height);
      await page.evaluate(`location.hash = "run=${fulfilRun}"`);
      await page.waitFor(
        `document.querySelectorAll('#run svg.dag g.node[data-step="ship"]').length === 1 &&
         document.querySelector("#failures .body").innerText.includes("sendReceipt")`,
        "the fulfil run and the failures",
      );
      const at = `${width} px: `;

      expect(at + "headers over their values", await page.evaluate(MISALIGNED), []);
      expect(at + "no word broken", await page.evaluate(BROKEN_WORDS), []);
      expect(at + "no panel cut off", await page.evaluate(CUT_OFF), []);

      // The map's box: its whole text inside, its tries counted per task.
      expect(at + "graph text inside its boxes", await page.evaluate(OVERFLOWING_NODES), []);
      const mapBox = await page.evaluate<string[]>(`[...document.querySelectorAll(
        '#run svg.dag g.node[data-step="chargeEachLineItemOnTheCustomerCard"] text')]
        .map((t) => t.textContent)`);
      expect(at + "the map's box", [mapBox[0], /^completed · \S+ s$/.test(mapBox[1]), mapBox[2]], [
        "[map] chargeEachLineItemOnTheCustomerCard",
        true,
        "2 tasks, 1 attempt each",
      ]);

      // The skipped step: its reason plain, not an error's red.
      const skipped = await stepRow(page, "notifyVipSuccessTeam");
      expect(at + "the skipped step's state and reason", [skipped[2], skipped[8]], [
        "skipped",
        "condition_unmet",
      ]);
      expect(
        at + "the skip reason's colour",
        await page.evaluate(`(cell => [cell.querySelectorAll(".error-text").length,
            getComputedStyle([...cell.querySelectorAll("*")].find((e) =>
              e.textContent === "condition_unmet") ?? cell).color === ${JSON.stringify(RED)}])(
          document.querySelector('#run .body > table tr[data-step="notifyVipSuccessTeam"]')
            .cells[8])`),
        [0, false],
      );

      // Failed runs retried or resumed since: marked in Runs and in Recent failures.
      const marks = await page.evaluate<Record<string, string | null>>(`Object.fromEntries(
        [["runs", "#recent"], ["failures", "#failures"]].flatMap(([panel, id]) =>
          ${JSON.stringify([retried, resumed])}.map((run) => [panel + " " + run.slice(0, 8),
            document.querySelector(id + ' tr[data-run="' + run + '"] .restarted')?.innerText ??
              null])))`);
      const mark = (verb: string, id: string) =>
        new RegExp(`^${verb} as ${id.slice(0, 8)} \\((started|failed)\\)$`);
      for (const [key, text] of Object.entries(marks)) {
        const source = key.endsWith(retried.slice(0, 8)) ? retried : resumed;
        const wanted = source === retried ? mark("retried", retry) : mark("resumed", resume);
        if (text === null || !wanted.test(text)) problems[`${at}restart mark, ${key}`] = text;
      }

      // #run=<id> brings the run into view, below a list of 50 runs; a refresh leaves the page be.
      await page.evaluate(`scrollTo(0, 0), location.hash = ""`);
      await page.waitFor(`!document.querySelector("#run svg.dag")`, "the run closed");
      await page.evaluate(`location.hash = "run=${fulfilRun}"`);
      await page.waitFor(`document.querySelector("#run svg.dag")`, "the run opened");
      expect(
        at + "the run opened by its address is in view",
        await page.evaluate(RUN_PANEL_SHOWN),
        true,
      );
      await page.evaluate(`scrollTo(0, 0)`);
      const refreshes = await page.evaluate<number>(`Number(document.body.dataset.refreshes)`);
      await page.waitFor(
        `Number(document.body.dataset.refreshes) >= ${refreshes + 2}`,
        "two more refreshes",
      );
      expect(at + "a refresh does not scroll", await page.evaluate(`scrollY`), 0);
      // A click on a row far down the list: that run, in view.
      const far = backlog[10];
      await page.evaluate(`document.querySelector('#recent tr[data-run="${far}"]').click()`);
      await page.waitFor(
        `document.querySelector('#run .run-head code')?.textContent === "${far}"`,
        "the clicked run",
      );
      expect(at + "a clicked run is in view", await page.evaluate(RUN_PANEL_SHOWN), true);

      await page.evaluate(`location.hash = "run=${fulfilRun}"`);
      await page.waitFor(`document.querySelector('#run svg.dag g.node[data-step="ship"]')`, "back");
      await Deno.mkdir(ARTIFACTS, { recursive: true });
      await page.screenshot(new URL(`dashboard_layout_${width}.png`, ARTIFACTS).pathname);
    }

    const errors = page.messages.filter((m) => /exception|error|Content Security Policy/i.test(m));
    assert.deepEqual(errors, [], "no script errors and no blocked content");
    assert.deepEqual(problems, {});
  } finally {
    await browser.close();
    if (dashboard !== undefined) {
      assert.equal(await dashboard.stop(), 0, dashboard.stderr());
    }
    await stopAll(workers);
  }
});
