/**
 * Which run the page shows: the address's `#run=<uuid>`, so a run can be linked to, reloaded and
 * reached with the browser's Back button.
 *
 * @module
 */

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * The run named by the address (`#run=<uuid>`), or `null`.
 *
 * @example
 * ```ts ignore
 * runFromHash(); // "0b7e12ab-…" on …/#run=0b7e12ab-…
 * ```
 */
export function runFromHash(): string | null {
  const m = /^#run=(.+)$/.exec(location.hash);
  if (m === null) return null;
  let id: string;
  try {
    id = decodeURIComponent(m[1]);
  } catch {
    return null;
  }
  return UUID.test(id) ? id : null;
}

/**
 * The address fragment that shows `runId`, for links.
 *
 * @example
 * ```ts ignore
 * el("a", { href: runHref(id) }, shortId(id));
 * ```
 */
export function runHref(runId: string): string {
  return `#run=${runId}`;
}

/**
 * Shows `runId` in the Run panel: a new address (the panel follows it), or, when it is shown
 * already, the panel brought into view again.
 *
 * @example
 * ```ts ignore
 * row.addEventListener("click", () => openRun(runId));
 * ```
 */
export function openRun(runId: string): void {
  if (runFromHash() === runId) showRunPanel();
  else location.hash = runHref(runId).slice(1);
}

/**
 * Scrolls the Run panel to the top of the window: a run opened from a long list, or by a link,
 * is otherwise drawn far below where the person is looking.
 *
 * @example
 * ```ts ignore
 * renderRun(run);
 * showRunPanel();
 * ```
 */
export function showRunPanel(): void {
  document.getElementById("run")?.scrollIntoView({ block: "start" });
}
