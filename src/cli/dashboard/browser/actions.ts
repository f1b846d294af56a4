/**
 * The run view's actions (Cancel, Retry, Resume), offered only when `/api/session` says the
 * dashboard allows them. A button opens a confirmation box; only its Confirm button sends the
 * POST, with the session's token.
 *
 * @module
 */
import type { ActionResult, RunDetail, SessionAnswer } from "../api.ts";
import type { ActionName } from "../actions.ts";
import { el } from "./dom.ts";
import { restartedVerb } from "./format.ts";
import { openRun } from "./nav.ts";

let session: SessionAnswer = { actions: false };
let pending: { readonly action: ActionName; readonly runId: string } | null = null;

const ACTION_TEXT: Readonly<Record<ActionName, string>> = {
  cancel: "Cancel run {run} of {flow}? Its queued and running tasks stop and it ends as cancelled.",
  retry: "Retry run {run} of {flow}? A new run starts with the same input, from the beginning.",
  resume: "Resume run {run} of {flow}? A new run starts that reuses every completed task (and " +
    "the skips they were built on) and runs only the rest.",
};

const byId = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

/**
 * Keeps what `/api/session` answered: whether actions are allowed, and their token.
 *
 * @example
 * ```ts ignore
 * useSession(await getJson<SessionAnswer>("/api/session"));
 * ```
 */
export function useSession(answer: SessionAnswer): void {
  session = answer;
}

/**
 * Whether the dashboard allows actions.
 *
 * @example
 * ```ts ignore
 * setStatus("ok", actionsAllowed() ? "live · actions allowed" : "live");
 * ```
 */
export function actionsAllowed(): boolean {
  return session.actions;
}

/**
 * The buttons a run offers: Cancel while it runs, Retry and Resume once it failed or was
 * cancelled; none without actions.
 *
 * @example
 * ```ts ignore
 * fill("run", [head, actionButtons(run)]);
 * ```
 */
export function actionButtons(run: RunDetail): HTMLElement | null {
  if (!session.actions) return null;
  const names: ActionName[] = run.status === "started"
    ? ["cancel"]
    : run.status === "failed" || run.status === "cancelled"
    ? ["retry", "resume"]
    : [];
  if (!names.length) return null;
  return el(
    "div",
    { className: "actions" },
    names.map((action) =>
      el("button", {
        className: "action",
        data: { action },
        onclick: () => ask(action, run),
      }, `${action.charAt(0).toUpperCase()}${action.slice(1)} run`)
    ),
  );
}

function ask(action: ActionName, run: RunDetail): void {
  pending = { action, runId: run.runId };
  // A run restarted before: say so, or a second click makes a second run unnoticed.
  const newest = action !== "cancel" ? run.restartedAs[0] : undefined;
  byId("confirm-text").textContent =
    ACTION_TEXT[action].replace("{run}", run.runId).replace("{flow}", run.flowSlug) +
    (newest
      ? ` It was ${
        restartedVerb(newest.mode)
      } already, as run ${newest.runId} (${newest.status}); this starts one more.`
      : "");
  byId("confirm-reason-label").hidden = action !== "cancel";
  byId<HTMLInputElement>("confirm-reason").value = "";
  byId("confirm-yes").textContent = `Confirm ${action}`;
  byId("confirm").hidden = false;
  byId("confirm").dataset.action = action;
}

function closeConfirm(): void {
  pending = null;
  byId("confirm").hidden = true;
}

/**
 * Shows one line under the run's heading: what an action did, or why it failed (in red).
 *
 * @example
 * ```ts ignore
 * showResult("cancel failed: HTTP 403", true);
 * ```
 */
export function showResult(text: string, bad = false): void {
  const p = byId("action-result");
  p.textContent = text;
  p.className = `action-result${bad ? " error-text" : ""}`;
  p.hidden = false;
}

async function confirm(refreshRun: () => Promise<void>): Promise<void> {
  if (pending === null || !session.actions) return;
  const job = pending;
  const body = job.action === "cancel"
    ? { reason: byId<HTMLInputElement>("confirm-reason").value }
    : {};
  closeConfirm();
  try {
    const res = await fetch(`/api/runs/${encodeURIComponent(job.runId)}/${job.action}`, {
      method: "POST",
      cache: "no-store",
      headers: { "content-type": "application/json", "x-pgflow-token": session.token },
      body: JSON.stringify(body),
    });
    const answer = await res.json().catch(() => ({})) as Partial<ActionResult> & {
      error?: string;
    };
    if (!res.ok) throw new Error(answer.error ?? `HTTP ${res.status}`);
    if (answer.newRunId) {
      showResult(`${job.action}: new run ${answer.newRunId}`);
      openRun(answer.newRunId);
    } else {
      showResult(
        `${job.action}: run ${answer.runId} is ${answer.status}` +
          (answer.cancelled === false ? " (it had already ended)" : ""),
      );
      await refreshRun();
    }
  } catch (e) {
    showResult(`${job.action} failed: ${(e as Error).message}`, true);
  }
}

/**
 * Wires the confirmation box's buttons; `refreshRun` redraws the run after a cancel.
 *
 * @example
 * ```ts ignore
 * wireConfirmation(refreshRun);
 * ```
 */
export function wireConfirmation(refreshRun: () => Promise<void>): void {
  byId("confirm-yes").addEventListener("click", () => confirm(refreshRun));
  byId("confirm-no").addEventListener("click", closeConfirm);
}
