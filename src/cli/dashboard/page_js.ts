/**
 * The dashboard page's script: polls `/api/overview` and the run search `/api/runs?…` every 2 s
 * (and `/api/runs/<id>` for the run shown, chosen by a click or `#run=<uuid>`), and rebuilds each
 * panel. Every value from the database goes into the page as a text node (`textContent`,
 * `createTextNode`), in HTML and in SVG alike, never as markup: a step output or error holding
 * `<script>` shows as those characters.
 *
 * Actions (when `/api/session` says the dashboard allows them) are buttons on the run view; each
 * opens a confirmation box, and only its Confirm button sends the POST, with the session's token.
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
  var session = { actions: false };
  var openStacks = {};
  var flowsShown = "";

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
  function between(a, b) {
    return a && b ? seconds((new Date(b) - new Date(a)) / 1000) : "-";
  }
  function shortId(id) { return id ? id.slice(0, 8) : "-"; }
  function runLink(runId) {
    return el("a", { data: { run: runId }, onclick: function (e) {
      e.preventDefault(); openRun(runId);
    } }, shortId(runId));
  }

  // --- panels ------------------------------------------------------------------------------
  // The depth over time, with its scale: the highest depth at the top, 0 at the bottom.
  function sparkline(history) {
    var w = 150, h = 28, left = 24, box = svg("svg", { class: "spark", width: w, height: h,
      viewBox: "0 0 " + w + " " + h, role: "img" });
    var depths = history.map(function (p) { return p.depth; });
    var max = Math.max.apply(null, depths.concat([1]));
    var span = history.length > 1 ? (history[history.length - 1].t - history[0].t) / 1000 : 0;
    var plot = w - left;
    var points = depths.map(function (d, i) {
      var x = left + (depths.length === 1 ? plot : (i * plot) / (depths.length - 1));
      return x.toFixed(1) + "," + (h - 2 - (d / max) * (h - 4)).toFixed(1);
    });
    box.appendChild(svg("title", {}, "depth over the last " + seconds(span) + " (" +
      depths.length + " samples): 0 to " + max));
    box.appendChild(svg("line", { x1: left - 2, y1: 2, x2: left - 2, y2: h - 2 }));
    box.appendChild(svg("text", { class: "max", x: left - 4, y: 9, "text-anchor": "end" }, max));
    box.appendChild(svg("text", { class: "zero", x: left - 4, y: h - 1, "text-anchor": "end" },
      0));
    if (points.length) box.appendChild(svg("polyline", { points: points.join(" ") }));
    return el("span", { className: "spark-box" }, [box, el("span", { className: "span" },
      history.length > 1 ? " " + seconds(span) : "")]);
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
  function renderWorkers(o) {
    fill("workers", orEmpty(o.workers, function () {
      return table(["queue", "function", "worker", "pairs served", "last heartbeat", "in flight",
        "started", "state"], o.workers.map(function (w) {
        return { data: { worker: w.workerId, queue: w.queueName }, cells: [w.queueName,
          w.functionName, el("code", { title: w.workerId }, shortId(w.workerId)), w.pairs,
          seconds(w.heartbeatSeconds) + " ago", w.inFlight, time(w.startedAt),
          badge(w.deprecated ? "deprecated" : "live")] };
      }), [false, false, false, true, true, true, false, false]);
    }, "No live worker."));
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
  function renderAliases(o) {
    fill("aliases", orEmpty(o.aliases || [], function () {
      return table(["alias", "starts", "other versions", "since"], o.aliases.map(function (a) {
        var others = a.versions.filter(function (v) { return v !== a.flowSlug; });
        return { data: { alias: a.alias }, cells: [a.alias, a.flowSlug,
          others.length ? others.join(", ") : "-", time(a.updatedAt)] };
      }));
    }, "No aliases."));
  }
  function renderRunCounts(o) {
    fill("runs", orEmpty(o.runCounts, function () {
      return table(["flow", "started", "completed", "failed", "cancelled"],
        o.runCounts.map(function (r) {
          return { data: { flow: r.flowSlug }, cells: [r.flowSlug, r.started, r.completed,
            r.failed, r.cancelled] };
        }), [false, true, true, true, true]);
    }, "No runs yet."));
    // The search's flow list follows the flows that have runs, keeping the choice made.
    var flows = o.runCounts.map(function (r) { return r.flowSlug; });
    if (flows.join("\n") !== flowsShown) {
      flowsShown = flows.join("\n");
      var select = document.getElementById("f-flow"), chosen = select.value;
      select.replaceChildren(el("option", {}, "any"));
      select.firstChild.value = "";
      flows.forEach(function (f) { select.appendChild(el("option", {}, f)); });
      select.value = flows.indexOf(chosen) >= 0 ? chosen : "";
    }
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
  function searchQuery() {
    var params = new URLSearchParams();
    var flow = document.getElementById("f-flow").value;
    var status = document.getElementById("f-status").value;
    var id = document.getElementById("f-id").value.trim();
    if (flow) params.set("flow", flow);
    if (status) params.set("status", status);
    if (id) params.set("id", id);
    params.set("limit", "50");
    return params.toString();
  }
  function renderSearch(runs) {
    fill("recent", orEmpty(runs, function () {
      return table(["started", "flow", "status", "took", "run", "restart of"],
        runs.map(function (r) {
          return { runId: r.runId, data: { run: r.runId }, cells: [time(r.startedAt), r.flowSlug,
            badge(r.status), seconds(r.seconds), shortId(r.runId),
            r.restartOf ? shortId(r.restartOf) : ""] };
        }), [false, false, false, true, false, false]);
    }, "No run matches."));
  }

  // --- one run's DAG -------------------------------------------------------------------------
  // Columns by depth. An edge that skips columns passes each column in between through a slot of
  // its own below that column's boxes, and crosses between columns in the gaps: it never runs
  // under a box that is not one of its ends.
  function dag(steps) {
    var level = {}, rows = {}, pos = {};
    var W = 170, H = 46, GX = 50, GY = 16, PAD = 10;
    function colX(l) { return PAD + l * (W + GX); }
    function rowY(r) { return PAD + r * (H + GY); }
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
      pos[s.stepSlug] = { x: colX(l), y: rowY(r) };
    });
    var edges = [];
    steps.forEach(function (s) {
      s.deps.forEach(function (d) {
        if (!pos[d]) return;
        var via = [];
        for (var l = level[d] + 1; l < level[s.stepSlug]; l++) {
          var r = rows[l] || 0;
          rows[l] = r + 1;
          maxRow = Math.max(maxRow, r);
          via.push({ x: colX(l), y: rowY(r) + H / 2 });
        }
        edges.push({ from: d, to: s.stepSlug, via: via });
      });
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
    function curve(x1, y1, x2, y2) {
      var mx = (x1 + x2) / 2;
      return " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2;
    }
    edges.forEach(function (e) {
      var a = pos[e.from], b = pos[e.to];
      var x = a.x + W, y = a.y + H / 2, d = "M" + x + "," + y;
      e.via.forEach(function (v) {
        d += curve(x, y, v.x, v.y) + " L" + (v.x + W) + "," + v.y;
        x = v.x + W;
        y = v.y;
      });
      d += curve(x, y, b.x, b.y + H / 2);
      box.appendChild(svg("path", { class: "edge", "marker-end": "url(#arrow)", d: d,
        "data-from": e.from, "data-to": e.to }));
    });
    steps.forEach(function (s) {
      var p = pos[s.stepSlug];
      var g = svg("g", { class: "node node-" + s.status + (s.reused ? " reused" : ""),
        "data-step": s.stepSlug, "data-status": s.status,
        transform: "translate(" + p.x + "," + p.y + ")" });
      g.appendChild(svg("title", {}, s.stepSlug + ": " + s.status + (s.reused ? " (reused)" : "") +
        (s.error ? " — " + s.error : "")));
      g.appendChild(svg("rect", { width: W, height: H }));
      g.appendChild(svg("text", { x: 8, y: 18 }, (s.stepType === "map" ? "[map] " : "") +
        s.stepSlug));
      g.appendChild(svg("text", { x: 8, y: 36, class: "sub" }, s.status +
        (s.reused ? " · reused" : "") +
        (s.seconds === null ? "" : " · " + seconds(s.seconds)) +
        (s.attempts > 1 ? " · " + s.attempts + " attempts" : "")));
      box.appendChild(g);
    });
    return box;
  }

  // --- why a step waits, and its attempts ------------------------------------------------------
  function waitText(w) {
    var n = w.tasks > 1 ? w.tasks + " tasks " : "";
    // Whether they wait out a delay could not be read (see StepWait's delayUnavailable).
    var unknown = w.delayUnavailable ? "; delayed until: unavailable (" + w.delayUnavailable + ")" : "";
    if (w.kind === "dependencies") return "waiting for dependencies: " + w.deps.join(", ");
    if (w.kind === "unserved") {
      return n + "queued on " + w.queue + ": no live worker serves " + w.flowSlug + "/" +
        w.stepSlug + unknown;
    }
    if (w.kind === "queued") {
      return n + "queued on " + w.queue + ": next for " + w.liveWorkers + " live worker" +
        (w.liveWorkers === 1 ? "" : "s") + unknown;
    }
    if (w.kind === "delayed") {
      return n + "delayed until " + time(w.until) + (w.retry ? " (retry backoff)" : " (start delay)");
    }
    if (w.kind === "running") {
      return n + "running on worker " + shortId(w.workerId) + " since " + time(w.since) +
        (w.workerLive ? "" : " (its worker is silent)");
    }
    return w.kind;
  }
  function whyCell(s) {
    if (s.waits && s.waits.length) {
      return el("ul", { className: "waits" }, s.waits.map(function (w) {
        return el("li", { data: { wait: w.kind } }, waitText(w));
      }));
    }
    return el("span", { className: "error-text" }, s.error || s.skipReason || "");
  }
  function stackCell(key, stack) {
    if (!stack) return "";
    var details = el("details", { className: "stack", data: { key: key } },
      [el("summary", {}, "stack"), el("pre", {}, stack)]);
    details.open = !!openStacks[key];
    details.addEventListener("toggle", function () { openStacks[key] = details.open; });
    return details;
  }
  function attempts(run) {
    var withHistory = run.steps.filter(function (s) { return s.history.length; });
    if (!withHistory.length) return null;
    return el("div", { className: "attempts" }, [el("h3", {}, "Attempts")].concat(
      withHistory.map(function (s) {
        return el("div", { data: { step: s.stepSlug } }, [
          el("h3", {}, s.stepSlug + (s.historyOmitted ? " (" + s.historyOmitted +
            " more not shown)" : "")),
          table(["task", "attempt", "outcome", "worker", "started", "ended", "took", "error",
            "stack"], s.history.map(function (a) {
            var key = s.stepSlug + "/" + a.taskIndex + "/" + a.attempt;
            return { data: { step: s.stepSlug, task: a.taskIndex, attempt: a.attempt,
              outcome: a.outcome }, cells: [a.taskIndex, a.attempt, badge(a.outcome),
              a.workerId ? el("code", { title: a.workerId }, shortId(a.workerId) +
                (a.functionName ? " (" + a.functionName + ")" : "")) : "-",
              time(a.startedAt), time(a.endedAt), between(a.startedAt, a.endedAt),
              el("span", { className: "error-text" }, a.error || ""), stackCell(key, a.stack)] };
          }), [true, true, false, false, false, false, true, false, false])]);
      })));
  }

  // --- actions -------------------------------------------------------------------------------
  var pending = null;
  var ACTION_TEXT = {
    cancel: "Cancel run {run} of {flow}? Its queued and running tasks stop and it ends as cancelled.",
    retry: "Retry run {run} of {flow}? A new run starts with the same input, from the beginning.",
    resume: "Resume run {run} of {flow}? A new run starts that reuses every completed task (and " +
      "the skips they were built on) and runs only the rest."
  };
  function actionButtons(run) {
    if (!session.actions) return null;
    var names = run.status === "started" ? ["cancel"] :
      (run.status === "failed" || run.status === "cancelled") ? ["retry", "resume"] : [];
    if (!names.length) return null;
    return el("div", { className: "actions" }, names.map(function (name) {
      return el("button", { className: "action", data: { action: name },
        onclick: function () { askAction(name, run); } },
        name.charAt(0).toUpperCase() + name.slice(1) + " run");
    }));
  }
  function restartedVerb(mode) {
    return mode === "retry" ? "retried" : mode === "resume" ? "resumed" : "restarted";
  }
  function askAction(name, run) {
    pending = { action: name, runId: run.runId };
    // A run restarted before: say so, or a second click makes a second run unnoticed.
    var newest = name !== "cancel" && run.restartedAs && run.restartedAs[0];
    document.getElementById("confirm-text").textContent = ACTION_TEXT[name]
      .replace("{run}", run.runId).replace("{flow}", run.flowSlug) +
      (newest ? " It was " + restartedVerb(newest.mode) + " already, as run " + newest.runId +
        " (" + newest.status + "); this starts one more." : "");
    document.getElementById("confirm-reason-label").hidden = name !== "cancel";
    document.getElementById("confirm-reason").value = "";
    document.getElementById("confirm-yes").textContent = "Confirm " + name;
    document.getElementById("confirm").hidden = false;
    document.getElementById("confirm").dataset.action = name;
  }
  function closeConfirm() {
    pending = null;
    document.getElementById("confirm").hidden = true;
  }
  function showResult(text, bad) {
    var p = document.getElementById("action-result");
    p.textContent = text;
    p.className = "action-result" + (bad ? " error-text" : "");
    p.hidden = false;
  }
  async function confirmAction() {
    if (!pending) return;
    var job = pending;
    closeConfirm();
    var body = job.action === "cancel"
      ? { reason: document.getElementById("confirm-reason").value } : {};
    try {
      var res = await fetch("/api/runs/" + encodeURIComponent(job.runId) + "/" + job.action, {
        method: "POST", cache: "no-store",
        headers: { "content-type": "application/json", "x-pgflow-token": session.token },
        body: JSON.stringify(body)
      });
      var answer = await res.json().catch(function () { return {}; });
      if (!res.ok) throw new Error(answer.error || ("HTTP " + res.status));
      if (answer.newRunId) {
        showResult(job.action + ": new run " + answer.newRunId);
        openRun(answer.newRunId);
      } else {
        showResult(job.action + ": run " + answer.runId + " is " + answer.status +
          (answer.cancelled === false ? " (it had already ended)" : ""));
        await refreshRun();
      }
    } catch (e) {
      showResult(job.action + " failed: " + e.message, true);
    }
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
    var lineage = [];
    if (run.restartOf) {
      lineage.push(el("span", { className: "restart-of" }, [(run.restartMode || "restart") +
        " of run ", runLink(run.restartOf)]));
    }
    (run.restartedAs || []).forEach(function (r) {
      lineage.push(el("span", { className: "restarted-as" }, [restartedVerb(r.mode) +
        " as run ", runLink(r.runId), " (" + r.status + ")"]));
    });
    var steps = table(["step", "type", "state", "tasks", "attempts", "started", "ended", "took",
      "why it waits, error or skip reason", "output"], run.steps.map(function (s) {
      return { data: { step: s.stepSlug, status: s.status }, cells: [s.stepSlug, s.stepType,
        s.reused ? [badge(s.status), " ", badge("reused")] : badge(s.status),
        s.tasks, s.attempts, time(s.startedAt), time(s.endedAt), seconds(s.seconds),
        whyCell(s),
        el("span", { className: "output" }, s.outputPreview === null ? "" : s.outputPreview)] };
    }), [false, false, false, true, true, false, false, true, false, false]);
    fill("run", [head,
      lineage.length ? el("p", { className: "lineage" }, lineage) : null,
      run.cancelReason ? el("p", { className: "cancel-reason" }, "cancelled: " + run.cancelReason)
        : null,
      run.error ? el("p", { className: "error-text" }, run.error) : null,
      actionButtons(run), dag(run.steps), steps, attempts(run)]);
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
  async function refreshSearch() {
    try {
      renderSearch(await getJson("/api/runs?" + searchQuery()));
    } catch (e) {
      fill("recent", el("p", { className: "error-text" }, e.message));
    }
  }
  async function refresh() {
    try {
      var o = await getJson("/api/overview");
      renderQueues(o); renderWorkers(o); renderCoverage(o); renderAliases(o); renderRunCounts(o);
      renderStuck(o); renderFailures(o);
      await refreshSearch();
      await refreshRun();
      setStatus("ok", session.actions ? "live · actions allowed" : "live");
      document.getElementById("updated").textContent = "updated " + time(o.now);
      document.body.dataset.refreshes = String(Number(document.body.dataset.refreshes || 0) + 1);
    } catch (e) {
      setStatus("error", "cannot read: " + e.message);
    }
    setTimeout(refresh, REFRESH_MS);
  }
  window.addEventListener("hashchange", function () {
    document.getElementById("action-result").hidden = true;
    if (runFromHash() !== shownRun) refreshRun();
  });
  var searchTimer = null;
  function searchSoon() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(refreshSearch, 200);
  }
  var form = document.getElementById("search");
  form.addEventListener("submit", function (e) { e.preventDefault(); refreshSearch(); });
  form.addEventListener("input", searchSoon);
  form.addEventListener("change", searchSoon);
  document.getElementById("confirm-yes").addEventListener("click", confirmAction);
  document.getElementById("confirm-no").addEventListener("click", closeConfirm);
  getJson("/api/session").then(function (s) { session = s; }, function () {})
    .then(function () { document.body.dataset.actions = String(session.actions); refresh(); });
})();
`;
