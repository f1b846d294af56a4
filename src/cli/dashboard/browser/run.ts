/**
 * The Run panel: one run's heading and lineage, its actions, its graph, a table of its steps
 * (with why each unfinished one waits, its error or its skip reason, the start of its output) and
 * every attempt of its tasks.
 *
 * @module
 */
import type { RunDetail, RunStep, StepWait } from "../run_view.ts";
import { actionButtons } from "./actions.ts";
import { dag } from "./dag.ts";
import { badge, type Content, el, fill, name, num, runLink, table } from "./dom.ts";
import { between, restartedVerb, seconds, shortId, time } from "./format.ts";

/** Stack traces a person opened, by step/task/attempt: kept open across refreshes. */
const openStacks = new Set<string>();

function waitText(w: StepWait): string {
  if (w.kind === "dependencies") return `waiting for dependencies: ${w.deps.join(", ")}`;
  const n = w.tasks > 1 ? `${w.tasks} tasks ` : "";
  // Whether they wait out a delay could not be read (see StepWait's delayUnavailable).
  const unknown = "delayUnavailable" in w && w.delayUnavailable
    ? `; delayed until: unavailable (${w.delayUnavailable})`
    : "";
  switch (w.kind) {
    case "unserved":
      return `${n}queued on ${w.queue}: no live worker serves ${w.flowSlug}/${w.stepSlug}${unknown}`;
    case "queued":
      return `${n}queued on ${w.queue}: next for ${w.liveWorkers} live worker${
        w.liveWorkers === 1 ? "" : "s"
      }${unknown}`;
    case "delayed":
      return `${n}delayed until ${time(w.until)}${w.retry ? " (retry backoff)" : " (start delay)"}`;
    case "capacity":
      return `${n}waiting since ${time(w.since)}: ${w.reason}`;
    case "event":
      return `waiting for event ${w.event}${w.key === null ? "" : ` (key ${w.key})`} since ${
        time(w.since)
      }${w.until === null ? "" : `, until ${time(w.until)}`}`;
    case "sleep":
      return `sleeping since ${time(w.since)} until ${time(w.until)}`;
    case "running":
      return `${n}running on worker ${shortId(w.workerId)} since ${time(w.since)}${
        w.workerLive ? "" : " (its worker is silent)"
      }`;
  }
}

// A skip is how the flow was built to go (a condition not met, a dependency skipped), not a
// fault: its reason is shown plainly; an error (a failure, or what made a step skip) in red.
function whyCell(s: RunStep): Content {
  if (s.waits.length) {
    return el(
      "ul",
      { className: "waits" },
      s.waits.map((w) => el("li", { data: { wait: w.kind } }, waitText(w))),
    );
  }
  return [
    s.skipReason === null ? null : el("span", { className: "skip-reason" }, s.skipReason),
    s.skipReason !== null && s.error !== null ? " " : null,
    s.error === null ? null : el("span", { className: "error-text" }, s.error),
  ];
}

function stackCell(key: string, stack: string | null): Content {
  if (!stack) return "";
  const details = el("details", { className: "stack", data: { key } }, [
    el("summary", {}, "stack"),
    el("pre", {}, stack),
  ]);
  details.open = openStacks.has(key);
  details.addEventListener("toggle", () => {
    if (details.open) openStacks.add(key);
    else openStacks.delete(key);
  });
  return details;
}

function attempts(run: RunDetail): HTMLElement | null {
  const withHistory = run.steps.filter((s) => s.history.length);
  if (!withHistory.length) return null;
  return el("div", { className: "attempts" }, [
    el("h3", {}, "Attempts"),
    withHistory.map((s) =>
      el("div", { data: { step: s.stepSlug } }, [
        el(
          "h3",
          {},
          s.stepSlug + (s.historyOmitted ? ` (${s.historyOmitted} more not shown)` : ""),
        ),
        table(
          [
            num("task"),
            num("attempt"),
            "outcome",
            "worker",
            "started",
            "ended",
            num("took"),
            "error",
            "stack",
          ],
          s.history.map((a) => ({
            data: {
              step: s.stepSlug,
              task: a.taskIndex,
              attempt: a.attempt,
              outcome: a.outcome,
            },
            cells: [
              a.taskIndex,
              a.attempt,
              badge(a.outcome),
              a.workerId
                ? el("code", { title: a.workerId }, [
                  shortId(a.workerId),
                  a.functionName ? [" (", name(a.functionName), ")"] : null,
                ])
                : "-",
              time(a.startedAt),
              time(a.endedAt),
              between(a.startedAt, a.endedAt),
              el("span", { className: "error-text" }, a.error ?? ""),
              stackCell(`${s.stepSlug}/${a.taskIndex}/${a.attempt}`, a.stack),
            ],
          })),
        ),
      ])
    ),
  ]);
}

function lineage(run: RunDetail): HTMLElement | null {
  const parts: Content[] = [];
  if (run.restartOf) {
    parts.push(
      el("span", { className: "restart-of" }, [
        `${run.restartMode ?? "restart"} of run `,
        runLink(run.restartOf),
      ]),
    );
  }
  for (const r of run.restartedAs) {
    parts.push(
      el("span", { className: "restarted-as" }, [
        `${restartedVerb(r.mode)} as run `,
        runLink(r.runId),
        ` (${r.status})`,
      ]),
    );
  }
  const { parent, children, childCount } = run.links;
  if (parent) {
    parts.push(
      el("span", { className: "child-of" }, [
        "child of run ",
        runLink(parent.runId),
        ` (step ${parent.stepSlug} [${parent.taskIndex}])`,
      ]),
    );
  }
  if (childCount > 0) {
    parts.push(
      el("span", { className: "children" }, [
        `${childCount} child run(s)${
          childCount > children.length ? `, the first ${children.length}` : ""
        }: `,
        ...children.flatMap((c, i) => [
          i === 0 ? "" : ", ",
          `${c.stepSlug}[${c.taskIndex}] `,
          runLink(c.runId),
          ` (${c.status})`,
        ]),
      ]),
    );
  }
  return parts.length ? el("p", { className: "lineage" }, parts) : null;
}

/**
 * Rebuilds the Run panel for `run`, or its invitation to click one when there is none.
 *
 * @example
 * ```ts ignore
 * renderRun(await getJson<RunDetail>(`/api/runs/${runId}`));
 * ```
 */
export function renderRun(run: RunDetail | null): void {
  if (run === null) {
    fill("run", el("p", { className: "empty" }, "Click a run to see its steps."));
    return;
  }
  const head = el("div", { className: "run-head" }, [
    el("span", {}, ["run ", el("code", {}, run.runId)]),
    el("span", {}, ["flow ", name(run.flowSlug)]),
    badge(run.status),
    el("span", {}, `started ${time(run.startedAt)}`),
    el("span", {}, `took ${seconds(run.seconds)}`),
  ]);
  const steps = table(
    [
      "step",
      "type",
      "state",
      num("tasks"),
      num("attempts"),
      "started",
      "ended",
      num("took"),
      "why it waits, error or skip reason",
      "output",
    ],
    run.steps.map((s) => ({
      data: { step: s.stepSlug, status: s.status },
      cells: [
        name(s.stepSlug),
        s.stepType,
        s.reused ? [badge(s.status), " ", badge("reused")] : badge(s.status),
        s.tasks,
        s.attempts,
        time(s.startedAt),
        time(s.endedAt),
        seconds(s.seconds),
        whyCell(s),
        el("span", { className: "output" }, s.outputPreview ?? ""),
      ],
    })),
  );
  fill("run", [
    head,
    lineage(run),
    run.cancelReason
      ? el("p", { className: "cancel-reason" }, `cancelled: ${run.cancelReason}`)
      : null,
    run.error ? el("p", { className: "error-text" }, run.error) : null,
    actionButtons(run),
    dag(run.steps),
    steps,
    attempts(run),
  ]);
}
