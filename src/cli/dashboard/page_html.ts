/**
 * The dashboard page's markup: an empty frame with one section per panel. Everything inside the
 * panels is built by the page's script (`browser/`) from the JSON endpoints, as text nodes.
 *
 * @module
 */

/**
 * The page served at `/`.
 *
 * @example
 * ```ts
 * import { PAGE_HTML } from "./page_html.ts";
 *
 * new Response(PAGE_HTML, { headers: { "content-type": "text/html; charset=utf-8" } });
 * ```
 */
/**
 * The page's icon served at `/favicon.svg`: three steps and their edges.
 *
 * @example
 * ```ts
 * import { FAVICON_SVG } from "./page_html.ts";
 *
 * new Response(FAVICON_SVG, { headers: { "content-type": "image/svg+xml" } });
 * ```
 */
export const FAVICON_SVG: string =
  `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><path d="M4 8h8M4 8l8-5M4 8l8 5" ` +
  `stroke="#57606a" stroke-width="1.5" fill="none"/><circle cx="3" cy="8" r="2.5" fill="#1a7f37"/>` +
  `<circle cx="13" cy="3" r="2.5" fill="#0969da"/><circle cx="13" cy="13" r="2.5" fill="#cf222e"/>` +
  `</svg>`;

export const PAGE_HTML: string = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pgflow dashboard</title>
<link rel="icon" href="/favicon.svg" type="image/svg+xml">
<link rel="stylesheet" href="/dashboard.css">
<script type="module" src="/js/main.js"></script>
</head>
<body>
<header>
  <h1>pgflow dashboard</h1>
  <span id="status" class="status pending">connecting…</span>
  <span id="updated"></span>
</header>
<main>
  <section id="queues" class="wide"><h2>Queues</h2><div class="body"></div></section>
  <section id="workers" class="wide"><h2>Live workers</h2><div class="body"></div></section>
  <section id="coverage" class="wide"><h2>Coverage</h2><div class="body"></div></section>
  <section id="stuck" class="wide"><h2>Stuck tasks</h2><div class="body"></div></section>
  <section id="aliases" class="wide"><h2>Aliases</h2><div class="body"></div></section>
  <section id="schedules" class="wide"><h2>Schedules</h2><div class="body"></div></section>
  <section id="runs"><h2>Runs by flow</h2><div class="body"></div></section>
  <section id="failures"><h2>Recent failures</h2><div class="body"></div></section>
  <section id="recent" class="wide"><h2>Runs</h2>
    <form id="search" class="search" role="search">
      <label>flow <select id="f-flow" name="flow"><option value="">any</option></select></label>
      <label>status <select id="f-status" name="status"><option value="">any</option>
        <option>started</option><option>completed</option><option>failed</option>
        <option>cancelled</option></select></label>
      <label>run id starts with <input id="f-id" name="id" size="14" maxlength="36"
        autocomplete="off" spellcheck="false" placeholder="0b7e…"></label>
    </form>
    <div class="body"></div></section>
  <section id="run" class="wide"><h2>Run</h2>
    <div id="confirm" class="confirm" hidden>
      <p id="confirm-text"></p>
      <label id="confirm-reason-label" hidden>reason (optional)
        <input id="confirm-reason" maxlength="500" size="40" autocomplete="off"></label>
      <button id="confirm-yes" type="button" class="danger">Confirm</button>
      <button id="confirm-no" type="button">Back</button>
    </div>
    <p id="action-result" class="action-result" hidden></p>
    <div class="body"><p class="empty">Click a run to see its steps.</p></div></section>
</main>
</body>
</html>
`;
