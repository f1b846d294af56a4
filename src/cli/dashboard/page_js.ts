/**
 * The dashboard page's script: polls `/api/overview` every 2 s (and `/api/runs/<id>` for the run
 * shown, chosen by a click or `#run=<uuid>`), and rebuilds each panel. Every value from the
 * database goes into the page as a text node (`textContent`, `createTextNode`), in HTML and in SVG
 * alike, never as markup: a step output or error holding `<script>` shows as those characters.
 *
 * @module
 */

/**
 * The script served at `/dashboard.js` (plain browser JavaScript, no build step).
 *
 * @example
 * ```ts
 * import { PAGE_JS } from "./page_js.ts";
 *
 * new Response(PAGE_JS, { headers: { "content-type": "text/javascript; charset=utf-8" } });
 * ```
 */
export const PAGE_JS: string = String.raw`"use strict";
(function () {
  var REFRESH_MS = 2000;
  var SVG_NS = "http://www.w3.org/2000/svg";
  var UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
  var shownRun = null;

  // --- building blocks: values always become text nodes -----------------------------------
  function el(tag, props, children) {
    var node = document.createElement(tag);
    props = props || {};
    if (props.className) node.className = props.className;
    if (props.title) node.title = String(props.title);
    if (props.onclick) node.addEventListener("click", props.onclick);
    if (props.data) {
      Object.keys(props.data).forEach(function (k) { node.dataset[k] = String(props.data[k]); });
    }
    append(node, children);
    return node;
  }
  function append(node, children) {
    if (children === undefined || children === null) return;
    if (!Array.isArray(children)) children = [children];
    children.forEach(function (c) {
      if (c === null || c === undefined) return;
      node.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    });
  }
  function svg(tag, attrs, text) {
    var node = document.createElementNS(SVG_NS, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    if (text !== undefined) node.textContent = String(text);
    return node;
  }
  function badge(status) { return el("span", { className: "badge s-" + status }, status); }
  function fill(id, content) {
    var body = document.querySelector("#" + id + " .body");
    body.replaceChildren();
    append(body, content);
  }
  function table(headers, rows, numeric) {
    var head = el("tr", {}, headers.map(function (h) { return el("th", {}, h); }));
    return el("table", {}, [el("thead", {}, head), el("tbody", {}, rows.map(function (r) {
      var cells = r.cells.map(function (c, i) {
        return el("td", { className: numeric && numeric[i] ? "num" : "" }, c);
      });
      return el("tr", { className: r.runId ? "link" : "", data: r.data || {},
        onclick: r.runId ? function () { openRun(r.runId); } : null }, cells);
    }))]);
  }
  function orEmpty(rows, build, emptyText) {
    return rows.length ? build() : el("p", { className: "empty" }, emptyText);
  }
  function seconds(s) {
    if (s === null || s === undefined) return "-";
    if (s < 10) return s.toFixed(1) + " s";
    if (s < 120) return Math.round(s) + " s";
    if (s < 7200) return Math.round(s / 60) + " min";
    return (s / 3600).toFixed(1) + " h";
  }
  function time(iso) {
    if (!iso) return "-";
    var d = new Date(iso);
    return d.toLocaleTimeString([], { hour12: false }) + "." +
      String(d.getMilliseconds()).padStart(3, "0");
  }
  function shortId(id) { return id.slice(0, 8); }

  // --- panels ------------------------------------------------------------------------------
  function sparkline(history) {
    var w = 120, h = 24, box = svg("svg", { class: "spark", width: w, height: h,
      viewBox: "0 0 " + w + " " + h, role: "img" });
    var depths = history.map(function (p) { return p.depth; });
    var max = Math.max.apply(null, depths.concat([1]));
    var points = depths.map(function (d, i) {
      var x = depths.length === 1 ? w : (i * w) / (depths.length - 1);
      return x.toFixed(1) + "," + (h - 2 - (d / max) * (h - 4)).toFixed(1);
    });
    box.appendChild(svg("title", {}, "depth over the last " + depths.length + " samples, max " +
      max));
    if (points.length) box.appendChild(svg("polyline", { points: points.join(" ") }));
    return box;
  }
  function coverageSummary(coverage, queue) {
    var counts = {};
    coverage.forEach(function (c) {
      if (c.queueName === queue) counts[c.status] = (counts[c.status] || 0) + 1;
    });
    var parts = Object.keys(counts).sort().map(function (k) { return counts[k] + " " + k; });
    return parts.length ? parts.join(", ") : "-";
  }
  function renderQueues(o) {
    fill("queues", orEmpty(o.queues, function () {
      return table(["queue", "messages", "visible", "oldest", "live workers", "coverage",
        "depth"], o.queues.map(function (q) {
        return { data: { queue: q.name }, cells: [q.name, q.messages === null ? "?" : q.messages,
          q.visible === null ? "-" : q.visible, seconds(q.oldestSeconds), q.liveWorkers,
          coverageSummary(o.coverage, q.name), sparkline(q.history || [])] };
      }), [false, true, true, true, true, false, false]);
    }, "No queues."));
  }
  function renderCoverage(o) {
    fill("coverage", orEmpty(o.coverage, function () {
      return table(["queue", "flow", "step", "queued", "started", "stale", "workers", "status"],
        o.coverage.map(function (c) {
          return { data: { pair: c.queueName + "/" + c.flowSlug + "/" + c.stepSlug },
            cells: [c.queueName, c.flowSlug, c.stepSlug, c.queuedTasks, c.startedTasks,
              c.staleTasks, c.liveWorkers, badge(c.status)] };
        }), [false, false, false, true, true, true, true, false]);
    }, "No routes and nothing in flight."));
  }
  function renderRunCounts(o) {
    fill("runs", orEmpty(o.runCounts, function () {
      return table(["flow", "started", "completed", "failed"], o.runCounts.map(function (r) {
        return { data: { flow: r.flowSlug }, cells: [r.flowSlug, r.started, r.completed,
          r.failed] };
      }), [false, true, true, true]);
    }, "No runs yet."));
  }
  function renderStuck(o) {
    fill("stuck", orEmpty(o.stuck, function () {
      return table(["why", "flow", "step", "task", "queue", "for", "timeout",
        "worker (last beat)"],
        o.stuck.map(function (t) {
          var worker = t.workerId === null ? "-" : shortId(t.workerId) + " (" +
            (t.heartbeatSeconds === null ? "gone" : seconds(t.heartbeatSeconds)) + ")";
          return { runId: t.runId, data: { run: t.runId, step: t.stepSlug }, cells: [
            el("span", { className: "badge s-stuck" }, t.reason), t.flowSlug, t.stepSlug,
            t.taskIndex, t.queueName, seconds(t.seconds), seconds(t.timeoutSeconds), worker] };
        }));
    }, "Nothing stuck."));
  }
  function renderFailures(o) {
    fill("failures", orEmpty(o.failures, function () {
      return table(["when", "flow", "step", "run", "error"], o.failures.map(function (f) {
        return { runId: f.runId, data: { run: f.runId, step: f.stepSlug }, cells: [
          time(f.failedAt), f.flowSlug, f.stepSlug, shortId(f.runId),
          el("span", { className: "error-text" }, f.error)] };
      }));
    }, "No failures."));
  }
  function renderRecent(o) {
    fill("recent", orEmpty(o.recentRuns, function () {
      return table(["started", "flow", "status", "took", "run"], o.recentRuns.map(function (r) {
        return { runId: r.runId, data: { run: r.runId }, cells: [time(r.startedAt), r.flowSlug,
          badge(r.status), seconds(r.seconds), shortId(r.runId)] };
      }), [false, false, false, true, false]);
    }, "No runs yet."));
  }

  // --- one run's DAG -------------------------------------------------------------------------
  function dag(steps) {
    var level = {}, rows = {}, pos = {};
    var W = 170, H = 46, GX = 50, GY = 16, PAD = 10;
    steps.forEach(function (s) {
      level[s.stepSlug] = s.deps.reduce(function (m, d) {
        return Math.max(m, (level[d] === undefined ? 0 : level[d]) + 1);
      }, 0);
    });
    var maxRow = 0, maxLevel = 0;
    steps.forEach(function (s) {
      var l = level[s.stepSlug], r = rows[l] || 0;
      rows[l] = r + 1;
      maxRow = Math.max(maxRow, r);
      maxLevel = Math.max(maxLevel, l);
      pos[s.stepSlug] = { x: PAD + l * (W + GX), y: PAD + r * (H + GY) };
    });
    var width = PAD * 2 + (maxLevel + 1) * W + maxLevel * GX;
    var height = PAD * 2 + (maxRow + 1) * H + maxRow * GY;
    var box = svg("svg", { class: "dag", width: width, height: height,
      viewBox: "0 0 " + width + " " + height, role: "img" });
    box.appendChild(svg("title", {}, "the run's steps and their dependencies"));
    var marker = svg("marker", { id: "arrow", viewBox: "0 0 8 8", refX: 8, refY: 4,
      markerWidth: 8, markerHeight: 8, orient: "auto" });
    marker.appendChild(svg("path", { d: "M0,0 L8,4 L0,8 z" }));
    box.appendChild(svg("defs", {})).appendChild(marker);
    steps.forEach(function (s) {
      s.deps.forEach(function (d) {
        var a = pos[d], b = pos[s.stepSlug];
        if (!a) return;
        var x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2, mx = (x1 + x2) / 2;
        box.appendChild(svg("path", { class: "edge", "marker-end": "url(#arrow)",
          d: "M" + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," +
            y2 }));
      });
    });
    steps.forEach(function (s) {
      var p = pos[s.stepSlug];
      var g = svg("g", { class: "node node-" + s.status, "data-step": s.stepSlug,
        "data-status": s.status, transform: "translate(" + p.x + "," + p.y + ")" });
      g.appendChild(svg("title", {}, s.stepSlug + ": " + s.status +
        (s.error ? " — " + s.error : "")));
      g.appendChild(svg("rect", { width: W, height: H }));
      g.appendChild(svg("text", { x: 8, y: 18 }, (s.stepType === "map" ? "[map] " : "") +
        s.stepSlug));
      g.appendChild(svg("text", { x: 8, y: 36, class: "sub" }, s.status +
        (s.seconds === null ? "" : " · " + seconds(s.seconds)) +
        (s.attempts > 1 ? " · " + s.attempts + " attempts" : "")));
      box.appendChild(g);
    });
    return box;
  }
  function renderRun(run) {
    if (!run) {
      fill("run", el("p", { className: "empty" }, "Click a run to see its steps."));
      return;
    }
    var head = el("div", { className: "run-head" }, [
      el("span", {}, ["run ", el("code", {}, run.runId)]), el("span", {}, ["flow ", run.flowSlug]),
      badge(run.status), el("span", {}, "started " + time(run.startedAt)),
      el("span", {}, "took " + seconds(run.seconds))]);
    var steps = table(["step", "type", "state", "tasks", "attempts", "started", "ended", "took",
      "error or skip reason", "output"], run.steps.map(function (s) {
      return { data: { step: s.stepSlug }, cells: [s.stepSlug, s.stepType, badge(s.status),
        s.tasks, s.attempts, time(s.startedAt), time(s.endedAt), seconds(s.seconds),
        el("span", { className: "error-text" }, s.error || s.skipReason || ""),
        el("span", { className: "output" }, s.outputPreview === null ? "" : s.outputPreview)] };
    }), [false, false, false, true, true, false, false, true, false, false]);
    fill("run", [head, run.error ? el("p", { className: "error-text" }, run.error) : null,
      dag(run.steps), steps]);
  }

  // --- polling ---------------------------------------------------------------------------------
  function setStatus(kind, text) {
    var s = document.getElementById("status");
    s.className = "status " + kind;
    s.textContent = text;
  }
  async function getJson(path) {
    var res = await fetch(path, { cache: "no-store" });
    var body = await res.json().catch(function () { return {}; });
    if (!res.ok) throw new Error(body.error || ("HTTP " + res.status));
    return body;
  }
  function runFromHash() {
    var m = /^#run=(.+)$/.exec(location.hash);
    return m && UUID.test(decodeURIComponent(m[1])) ? decodeURIComponent(m[1]) : null;
  }
  function openRun(runId) { location.hash = "run=" + runId; }
  async function refreshRun() {
    var runId = runFromHash();
    if (runId === null) { shownRun = null; renderRun(null); return; }
    try {
      var run = await getJson("/api/runs/" + encodeURIComponent(runId));
      shownRun = runId;
      renderRun(run);
    } catch (e) {
      fill("run", el("p", { className: "error-text" }, "run " + runId + ": " + e.message));
    }
  }
  async function refresh() {
    try {
      var o = await getJson("/api/overview");
      renderQueues(o); renderCoverage(o); renderRunCounts(o); renderStuck(o); renderFailures(o);
      renderRecent(o);
      await refreshRun();
      setStatus("ok", "live");
      document.getElementById("updated").textContent = "updated " + time(o.now);
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    } catch (e) {
      setStatus("error", "cannot read: " + e.message);
    }
    setTimeout(refresh, REFRESH_MS);
  }
  window.addEventListener("hashchange", function () {
    if (runFromHash() !== shownRun) refreshRun();
  });
  refresh();
})();
`;
