/**
 * The overview's panels (Queues, Live workers, Coverage, Aliases, Schedules, Runs by flow, Stuck
 * tasks, Recent failures) and the run search's results, each rebuilt from the latest answer.
 *
 * @module
 */
import type { RunRestart } from "../../../client/types.ts";
import type { OverviewAnswer, QueueWithHistory, RunSearchRow } from "../api.ts";
import type { CoverageInfo } from "../queries.ts";
import type { DepthSample } from "../history.ts";
import {
  badge,
  type Content,
  el,
  fill,
  name,
  num,
  orEmpty,
  prose,
  runLink,
  svg,
  table,
} from "./dom.ts";
import { restartedVerb, seconds, shortId, time } from "./format.ts";

// The depth over time, with its scale: the highest depth at the top, 0 at the bottom.
function sparkline(history: readonly DepthSample[]): HTMLElement {
  const w = 150, h = 28, left = 24;
  const box = svg("svg", {
    class: "spark",
    width: w,
    height: h,
    viewBox: `0 0 ${w} ${h}`,
    role: "img",
  });
  const depths = history.map((p) => p.depth);
  const max = Math.max(1, ...depths);
  const span = history.length > 1 ? (history[history.length - 1].t - history[0].t) / 1000 : 0;
  const plot = w - left;
  const points = depths.map((d, i) => {
    const x = left + (depths.length === 1 ? plot : (i * plot) / (depths.length - 1));
    return `${x.toFixed(1)},${(h - 2 - (d / max) * (h - 4)).toFixed(1)}`;
  });
  box.appendChild(
    svg(
      "title",
      {},
      `depth over the last ${seconds(span)} (${depths.length} samples): 0 to ${max}`,
    ),
  );
  box.appendChild(svg("line", { x1: left - 2, y1: 2, x2: left - 2, y2: h - 2 }));
  box.appendChild(svg("text", { class: "max", x: left - 4, y: 9, "text-anchor": "end" }, max));
  box.appendChild(svg("text", { class: "zero", x: left - 4, y: h - 1, "text-anchor": "end" }, 0));
  if (points.length) box.appendChild(svg("polyline", { points: points.join(" ") }));
  return el("span", { className: "spark-box" }, [
    box,
    el("span", { className: "span" }, history.length > 1 ? ` ${seconds(span)}` : ""),
  ]);
}

function coverageSummary(coverage: readonly CoverageInfo[], queue: string): string {
  const counts = new Map<string, number>();
  for (const c of coverage) {
    if (c.queueName === queue) counts.set(c.status, (counts.get(c.status) ?? 0) + 1);
  }
  const parts = [...counts.keys()].sort().map((k) => `${counts.get(k)} ${k}`);
  return parts.length ? parts.join(", ") : "-";
}

function renderQueues(o: OverviewAnswer): void {
  fill(
    "queues",
    orEmpty(o.queues, () =>
      table(
        [
          "queue",
          num("messages"),
          num("visible"),
          num("oldest"),
          num("live workers"),
          "coverage",
          "depth",
        ],
        o.queues.map((q: QueueWithHistory) => ({
          data: { queue: q.name },
          cells: [
            name(q.name),
            q.messages === null ? "?" : q.messages,
            q.visible === null ? "-" : q.visible,
            seconds(q.oldestSeconds),
            q.liveWorkers,
            prose(coverageSummary(o.coverage, q.name)),
            sparkline(q.history),
          ],
        })),
      ), "No queues."),
  );
}

function renderWorkers(o: OverviewAnswer): void {
  fill(
    "workers",
    orEmpty(o.workers, () =>
      table(
        [
          "queue",
          "function",
          "worker",
          num("pairs served"),
          num("last heartbeat"),
          num("in flight"),
          "started",
          "state",
        ],
        o.workers.map((w) => ({
          data: { worker: w.workerId, queue: w.queueName },
          cells: [
            name(w.queueName),
            name(w.functionName),
            el("code", { title: w.workerId }, shortId(w.workerId)),
            w.pairs,
            `${seconds(w.heartbeatSeconds)} ago`,
            w.inFlight,
            time(w.startedAt),
            badge(w.deprecated ? "deprecated" : "live"),
          ],
        })),
      ), "No live worker."),
  );
}

function renderCoverage(o: OverviewAnswer): void {
  fill(
    "coverage",
    orEmpty(o.coverage, () =>
      table(
        [
          "queue",
          "flow",
          "step",
          num("queued"),
          num("started"),
          num("stale"),
          num("workers"),
          "status",
        ],
        o.coverage.map((c) => ({
          data: { pair: `${c.queueName}/${c.flowSlug}/${c.stepSlug}` },
          cells: [
            name(c.queueName),
            name(c.flowSlug),
            name(c.stepSlug),
            c.queuedTasks,
            c.startedTasks,
            c.staleTasks,
            c.liveWorkers,
            badge(c.status),
          ],
        })),
      ), "No routes and nothing in flight."),
  );
}

function renderAliases(o: OverviewAnswer): void {
  fill(
    "aliases",
    orEmpty(o.aliases, () =>
      table(
        ["alias", "starts", "other versions", "since"],
        o.aliases.map((a) => {
          const others = a.versions.filter((v) => v !== a.flowSlug);
          return {
            data: { alias: a.alias },
            cells: [
              name(a.alias),
              name(a.flowSlug),
              others.length ? prose(others.join(", ")) : "-",
              time(a.updatedAt),
            ],
          };
        }),
      ), "No aliases."),
  );
}

function renderSchedules(o: OverviewAnswer): void {
  fill(
    "schedules",
    orEmpty(o.schedules, () =>
      table(
        ["schedule", "starts", "timing", "next tick", "last tick", "last run", num("skipped")],
        o.schedules.map((s) => ({
          data: { schedule: s.name },
          cells: [
            name(s.name),
            name(s.flow),
            prose(s.timing),
            s.paused
              ? el("span", { className: "badge s-cancelled" }, "paused")
              : s.nextTickAt === null
              ? "-"
              : time(s.nextTickAt),
            s.lastTickAt === null ? "-" : time(s.lastTickAt),
            s.lastError !== null
              ? el("span", { className: "badge s-failed", title: s.lastError }, "not started")
              : s.lastRunId === null
              ? "-"
              : runLink(s.lastRunId),
            s.skippedTicks,
          ],
        })),
      ), "No schedules."),
  );
}

let flowsShown = "";

function renderRunCounts(o: OverviewAnswer): void {
  fill(
    "runs",
    orEmpty(o.runCounts, () =>
      table(
        ["flow", num("started"), num("completed"), num("failed"), num("cancelled")],
        o.runCounts.map((r) => ({
          data: { flow: r.flowSlug },
          cells: [name(r.flowSlug), r.started, r.completed, r.failed, r.cancelled],
        })),
      ), "No runs yet."),
  );
  // The search's flow list follows the flows that have runs, keeping the choice made.
  const flows = o.runCounts.map((r) => r.flowSlug);
  if (flows.join("\n") === flowsShown) return;
  flowsShown = flows.join("\n");
  const select = document.getElementById("f-flow") as HTMLSelectElement;
  const chosen = select.value;
  const any = el("option", {}, "any");
  any.value = "";
  select.replaceChildren(any, ...flows.map((f) => el("option", {}, f)));
  select.value = flows.includes(chosen) ? chosen : "";
}

function renderStuck(o: OverviewAnswer): void {
  fill(
    "stuck",
    orEmpty(o.stuck, () =>
      table(
        [
          "why",
          "flow",
          "step",
          num("task"),
          "queue",
          num("for"),
          num("timeout"),
          "worker (last beat)",
        ],
        o.stuck.map((t) => ({
          runId: t.runId,
          data: { run: t.runId, step: t.stepSlug },
          cells: [
            el("span", { className: "badge s-stuck" }, t.reason),
            name(t.flowSlug),
            name(t.stepSlug),
            t.taskIndex,
            name(t.queueName),
            seconds(t.seconds),
            seconds(t.timeoutSeconds),
            t.workerId === null
              ? "-"
              : `${shortId(t.workerId)} (${
                t.heartbeatSeconds === null ? "gone" : seconds(t.heartbeatSeconds)
              })`,
          ],
        })),
      ), "Nothing stuck."),
  );
}

/**
 * A listed run's newest retry or resume: `retried as 1a2b3c4d (completed)`, a link to it, and
 * how many more there are; nothing for a run never restarted.
 *
 * @example
 * ```ts ignore
 * restartMark(run.restartedAs);
 * ```
 */
export function restartMark(restarts: readonly RunRestart[]): Content {
  const newest = restarts[0];
  if (newest === undefined) return "";
  const more = restarts.length > 1 ? `, ${restarts.length - 1} more` : "";
  return el("span", { className: "restarted", data: { restarted: newest.mode } }, [
    `${restartedVerb(newest.mode)} as `,
    runLink(newest.runId),
    ` (${newest.status})${more}`,
  ]);
}

function renderFailures(o: OverviewAnswer): void {
  fill(
    "failures",
    orEmpty(o.failures, () =>
      table(
        ["when", "flow", "step", "run", "error", "restarted as"],
        o.failures.map((f) => ({
          runId: f.runId,
          data: { run: f.runId, step: f.stepSlug },
          cells: [
            time(f.failedAt),
            name(f.flowSlug),
            name(f.stepSlug),
            shortId(f.runId),
            el("span", { className: "error-text" }, f.error),
            restartMark(f.restartedAs),
          ],
        })),
      ), "No failures."),
  );
}

/**
 * Rebuilds every panel of the overview.
 *
 * @example
 * ```ts ignore
 * renderOverview(await getJson<OverviewAnswer>("/api/overview"));
 * ```
 */
export function renderOverview(o: OverviewAnswer): void {
  renderQueues(o);
  renderWorkers(o);
  renderCoverage(o);
  renderAliases(o);
  renderSchedules(o);
  renderRunCounts(o);
  renderStuck(o);
  renderFailures(o);
}

/**
 * The run search's query string, from the form: flow, status, start of the run id; 50 at most.
 *
 * @example
 * ```ts ignore
 * await getJson<RunSearchRow[]>(`/api/runs?${searchQuery()}`);
 * ```
 */
export function searchQuery(): string {
  const params = new URLSearchParams();
  const value = (id: string) =>
    (document.getElementById(id) as HTMLInputElement | HTMLSelectElement).value.trim();
  if (value("f-flow")) params.set("flow", value("f-flow"));
  if (value("f-status")) params.set("status", value("f-status"));
  if (value("f-id")) params.set("id", value("f-id"));
  params.set("limit", "50");
  return params.toString();
}

/**
 * Rebuilds the Runs panel from a search's results.
 *
 * @example
 * ```ts ignore
 * renderSearch(await getJson<RunSearchRow[]>(`/api/runs?${searchQuery()}`));
 * ```
 */
export function renderSearch(runs: readonly RunSearchRow[]): void {
  fill(
    "recent",
    orEmpty(runs, () =>
      table(
        ["started", "flow", "status", num("took"), "run", "restart of", "restarted as"],
        runs.map((r) => ({
          runId: r.runId,
          data: { run: r.runId },
          cells: [
            time(r.startedAt),
            name(r.flowSlug),
            badge(r.status),
            seconds(r.seconds),
            shortId(r.runId),
            r.restartOf ? runLink(r.restartOf) : "",
            restartMark(r.restartedAs),
          ],
        })),
      ), "No run matches."),
  );
}
