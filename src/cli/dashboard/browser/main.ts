/**
 * The page's entry (`/js/main.js`): polls `/api/overview` and the run search `/api/runs?…` every
 * 2 s, and `/api/runs/<id>` for the run the address names (`#run=<uuid>`, set by a click), and
 * rebuilds each panel. A run newly opened is scrolled into view once; later refreshes leave the
 * scroll position alone.
 *
 * @module
 */
import type { OverviewAnswer, RunDetail, RunSearchRow, SessionAnswer } from "../api.ts";
import { actionsAllowed, useSession, wireConfirmation } from "./actions.ts";
import { el, fill } from "./dom.ts";
import { time } from "./format.ts";
import { runFromHash, showRunPanel } from "./nav.ts";
import { renderOverview, renderSearch, searchQuery } from "./panels.ts";
import { renderRun } from "./run.ts";

const REFRESH_MS = 2000;
/** The run drawn in the Run panel. */
let shownRun: string | null = null;
/** The run last brought into view: each newly opened run is, once. */
let scrolledTo: string | null = null;

async function getJson<T>(path: string): Promise<T> {
  const res = await fetch(path, { cache: "no-store" });
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error((body as { error?: string }).error ?? `HTTP ${res.status}`);
  return body as T;
}

function setStatus(kind: "ok" | "error", text: string): void {
  const s = document.getElementById("status")!;
  s.className = `status ${kind}`;
  s.textContent = text;
}

async function refreshRun(): Promise<void> {
  const runId = runFromHash();
  if (runId === null) {
    shownRun = null;
    scrolledTo = null;
    renderRun(null);
    return;
  }
  try {
    const run = await getJson<RunDetail>(`/api/runs/${encodeURIComponent(runId)}`);
    // Another run was opened while this one was read: that one's read draws it.
    if (runFromHash() !== runId) return;
    shownRun = runId;
    renderRun(run);
  } catch (e) {
    fill("run", el("p", { className: "error-text" }, `run ${runId}: ${(e as Error).message}`));
  }
  if (scrolledTo !== runId) {
    scrolledTo = runId;
    showRunPanel();
  }
}

async function refreshSearch(): Promise<void> {
  try {
    renderSearch(await getJson<RunSearchRow[]>(`/api/runs?${searchQuery()}`));
  } catch (e) {
    fill("recent", el("p", { className: "error-text" }, (e as Error).message));
  }
}

async function refresh(): Promise<void> {
  try {
    const o = await getJson<OverviewAnswer>("/api/overview");
    renderOverview(o);
    await refreshSearch();
    await refreshRun();
    setStatus("ok", actionsAllowed() ? "live · actions allowed" : "live");
    document.getElementById("updated")!.textContent = `updated ${time(o.now)}`;
    const body = document.body.dataset;
    body.refreshes = String(Number(body.refreshes ?? 0) + 1);
  } catch (e) {
    setStatus("error", `cannot read: ${(e as Error).message}`);
  }
  setTimeout(refresh, REFRESH_MS);
}

addEventListener("hashchange", () => {
  document.getElementById("action-result")!.hidden = true;
  if (runFromHash() !== shownRun) refreshRun();
});

let searchTimer: ReturnType<typeof setTimeout> | undefined;
function searchSoon(): void {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(refreshSearch, 200);
}
const form = document.getElementById("search")!;
form.addEventListener("submit", (e) => {
  e.preventDefault();
  refreshSearch();
});
form.addEventListener("input", searchSoon);
form.addEventListener("change", searchSoon);
wireConfirmation(refreshRun);

getJson<SessionAnswer>("/api/session").then(useSession, () => {}).then(() => {
  document.body.dataset.actions = String(actionsAllowed());
  refresh();
});
