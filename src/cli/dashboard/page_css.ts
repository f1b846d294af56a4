/**
 * The dashboard page's style sheet.
 *
 * @module
 */

/**
 * The style sheet served at `/dashboard.css`.
 *
 * @example
 * ```ts
 * import { PAGE_CSS } from "./page_css.ts";
 *
 * new Response(PAGE_CSS, { headers: { "content-type": "text/css; charset=utf-8" } });
 * ```
 */
export const PAGE_CSS: string = `
:root { --ok: #1a7f37; --bad: #cf222e; --warn: #9a6700; --run: #0969da; --idle: #6e7781;
  --line: #d0d7de; --bg: #f6f8fa; font: 14px/1.4 system-ui, sans-serif; color: #1f2328; }
body { margin: 0; background: var(--bg); }
header { display: flex; gap: 1em; align-items: baseline; padding: .6em 1em; background: #24292f;
  color: #fff; }
header h1 { font-size: 1.1em; margin: 0; }
#updated { color: #afb8c1; font-size: .9em; }
.status { padding: 0 .5em; border-radius: 3px; font-size: .9em; }
.status.ok { background: var(--ok); } .status.error { background: var(--bad); }
.status.pending { background: var(--idle); }
main { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 1em;
  padding: 1em; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: .5em 1em;
  overflow-x: auto; min-width: 0; }
section.wide { grid-column: 1 / -1; }
h2 { font-size: 1em; margin: .3em 0 .6em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .2em .6em .2em 0; border-bottom: 1px solid var(--line);
  vertical-align: top; white-space: nowrap; }
/* A header may wrap at its spaces: "why it waits, error or skip reason" is wider than its values. */
th { font-weight: 600; color: #57606a; white-space: normal; }
th.num, td.num { text-align: right; }
td.num { font-variant-numeric: tabular-nums; }
/* A cell never breaks inside a word, a time or a number: names wrap only between their parts
   (the page puts <wbr> there), prose at its spaces; errors and outputs, which may hold one long
   token, may break anywhere once a line holds nothing else. */
.name, .prose, .waits, .restarted { white-space: normal; }
tr.link { cursor: pointer; } tr.link:hover { background: #eaeef2; }
.empty { color: #57606a; }
.error-text, .output, .skip-reason { font-family: ui-monospace, monospace; white-space: pre-wrap;
  overflow-wrap: anywhere; font-size: .9em; }
.error-text { color: var(--bad); }
/* A skip is how the flow was built to go, not a fault. */
.skip-reason { color: #57606a; }
.badge { white-space: nowrap; padding: 0 .4em; border-radius: 3px; color: #fff; font-size: .85em; }
.s-ok, .s-completed, .s-live { background: var(--ok); } .s-MISSING, .s-failed { background: var(--bad); }
.s-STALE, .s-PARTIAL, .s-stuck { background: var(--warn); } .s-started { background: var(--run); }
.s-idle, .s-created, .s-skipped, .s-not-started, .s-queued, .s-waiting { background: var(--idle); }
/* Attempts that did not count: the handler was told "later", or its worker stopped. */
.s-deferred, .s-interrupted { background: var(--idle); }
.s-cancelled, .s-stopped, .s-stalled, .s-deprecated { background: var(--warn); }
.s-running { background: var(--run); } .s-reused { background: #8250df; }
svg.spark { vertical-align: middle; }
svg.spark polyline { fill: none; stroke: var(--run); stroke-width: 1.5; }
svg.spark line { stroke: var(--line); } svg.spark text { font: 9px system-ui, sans-serif;
  fill: #57606a; }
svg.dag rect { stroke-width: 1.5; rx: 6; }
svg.dag .node-created rect { fill: #f6f8fa; stroke: var(--idle); }
svg.dag .node-started rect { fill: #ddf4ff; stroke: var(--run); }
svg.dag .node-completed rect { fill: #dafbe1; stroke: var(--ok); }
svg.dag .node-failed rect { fill: #ffebe9; stroke: var(--bad); }
svg.dag .node-skipped rect, svg.dag .node-not-started rect { fill: #eaeef2; stroke: var(--idle);
  stroke-dasharray: 4 3; }
svg.dag .node-queued rect, svg.dag .node-waiting rect { fill: #f6f8fa; stroke: var(--run);
  stroke-dasharray: 4 3; }
svg.dag .node-cancelled rect, svg.dag .node-stopped rect { fill: #fff8c5; stroke: var(--warn); }
svg.dag .node.reused rect { stroke: #8250df; stroke-dasharray: 2 2; }
svg.dag text { font: 12px system-ui, sans-serif; fill: #1f2328; }
svg.dag text.sub { fill: #57606a; font-size: 11px; }
svg.dag path.edge { fill: none; stroke: #8c959f; stroke-width: 1.5; }
svg.dag marker path { fill: #8c959f; }
.run-head { display: flex; gap: 1.5em; flex-wrap: wrap; margin-bottom: .5em; }
main a { cursor: pointer; color: var(--run); text-decoration: underline; }
.search { display: flex; gap: 1em; flex-wrap: wrap; margin-bottom: .5em; }
.actions { display: flex; gap: .5em; margin: .5em 0; }
button { font: inherit; padding: .2em .8em; border: 1px solid var(--line); border-radius: 4px;
  background: #f6f8fa; cursor: pointer; }
button.danger { background: var(--bad); color: #fff; border-color: var(--bad); }
.confirm { border: 2px solid var(--bad); border-radius: 6px; padding: .5em 1em; margin: .5em 0;
  background: #fff8f8; }
.action-result { font-weight: 600; }
.waits { margin: 0; padding-left: 1.2em; }
.attempts h3 { font-size: .95em; margin: .8em 0 .3em; }
details.stack summary { cursor: pointer; color: #57606a; }
details.stack pre { white-space: pre-wrap; overflow-wrap: anywhere; font-size: .85em; margin: .2em 0; }
`;
