/**
 * How `pgflow runs` prints runs: a table of summaries, one run in full (steps, why it ended,
 * attempts), and the JSON of both. Never an input, an output or a message body: errors and stacks
 * only, as the engine stores them (bounded).
 *
 * @module
 */
import type {
  RunRestart,
  RunState,
  RunSummary,
  StepState,
  StepWait,
  TaskAttempt,
  WaitingTasks,
} from "../../client/types.ts";

/** Lines of stack shown per attempt in text (the JSON has it whole). */
const STACK_LINES = 8;

/**
 * A table of runs, newest first, one line each.
 *
 * @example
 * ```ts
 * import { formatRunList } from "./format.ts";
 *
 * console.log(formatRunList([]).join("\n"));
 * ```
 */
export function formatRunList(runs: readonly RunSummary[]): string[] {
  return table(
    ["run id", "flow", "status", "started", "ended", "restart of", "restarted as", "error"],
    runs.map((r) => [
      r.runId,
      r.flowSlug,
      r.status,
      r.startedAt,
      r.completedAt ?? r.failedAt ?? r.cancelledAt ?? "-",
      r.restartOfRunId === null ? "-" : `${r.restartMode ?? "?"} of ${r.restartOfRunId}`,
      r.restarts.length === 0 ? "-" : restartedAs(r.restarts[0]) +
        (r.restarts.length > 1 ? ` (+${r.restarts.length - 1} more)` : ""),
      r.error === null ? "" : oneLine(r.error, 60),
    ]),
  );
}

/**
 * A run made from another, seen from its source: `retried as <id>` or `resumed as <id>`.
 *
 * @example
 * ```ts
 * import { restartedAs } from "./format.ts";
 *
 * restartedAs({ runId: "0b6c…", mode: "retry", status: "started", startedAt: "" }); // "retried as 0b6c…"
 * ```
 */
export function restartedAs(r: RunRestart): string {
  return `${r.mode === "retry" ? "retried" : "resumed"} as ${r.runId}`;
}

/**
 * Why a run is where it is, in one line.
 *
 * @example
 * ```ts
 * import { whyEnded } from "./format.ts";
 *
 * // whyEnded(await client.getRun(id)) // "failed at step explode: the disk is on fire"
 * ```
 */
export function whyEnded(run: RunState): string {
  switch (run.status) {
    case "completed":
      return "completed: every step completed or was skipped";
    case "cancelled":
      return `cancelled at ${run.cancelledAt ?? "?"}: ${run.cancelReason ?? "no reason given"}`;
    case "failed": {
      const step = run.steps.find((s) => s.status === "failed");
      const error = oneLine(step?.error ?? run.error ?? "no error was recorded", 300);
      return step === undefined ? `failed: ${error}` : `failed at step ${step.stepSlug}: ${error}`;
    }
    default:
      return `still running: ${run.remainingSteps} step(s) not finished`;
  }
}

/**
 * One run in full: the run, its steps, why it ended and the attempt history (the stack's first
 * lines).
 *
 * @example
 * ```ts
 * import { formatRun } from "./format.ts";
 *
 * // console.log(formatRun(await client.getRun(id)).join("\n"));
 * ```
 */
export function formatRun(run: RunState): string[] {
  const out: string[] = [];
  const row = (label: string, value: string) => out.push(`${label.padEnd(9)} ${value}`);
  row("run", run.runId);
  row("flow", run.flowSlug);
  row("status", run.status);
  row("started", run.startedAt);
  const ended = run.completedAt ?? run.failedAt ?? run.cancelledAt;
  if (ended !== null) row("ended", `${ended} (after ${duration(run.startedAt, ended)})`);
  if (run.restartOfRunId !== null) {
    row("restart", `${run.restartMode ?? "restart"} of ${run.restartOfRunId}`);
  }
  for (const r of run.restarts) row("restarted", `${restartedAs(r)} (${r.status}, ${r.startedAt})`);
  if (run.parent !== null) {
    row("parent", `${run.parent.runId} (step ${run.parent.stepSlug} [${run.parent.taskIndex}])`);
  }
  row("why", whyEnded(run));
  out.push("", "steps");
  const steps = table(
    ["step", "type", "status", "tasks", "started", "ended", "note"],
    run.steps.map((s) => [
      s.stepSlug,
      s.stepType,
      shownStatus(s),
      s.initialTasks === null
        ? "-"
        : `${s.initialTasks - (s.remainingTasks ?? 0)}/${s.initialTasks}`,
      s.startedAt ?? "-",
      s.completedAt ?? s.failedAt ?? s.skippedAt ?? s.cancelledAt ?? "-",
      s.reused
        ? `reused from the source run${s.skipReason === null ? "" : ` (skipped: ${s.skipReason})`}`
        : s.skipReason !== null
        ? `skipped: ${s.skipReason}`
        : s.wait !== null && s.status === "started"
        ? waitNote(s.wait)
        : s.waiting.length > 0
        ? waitingNote(s.waiting)
        : s.error !== null
        ? oneLine(s.error, 80)
        : "",
    ]),
  );
  out.push(...steps.map((l) => `  ${l}`));
  for (const s of run.steps) if (s.childFlow !== null) out.push("", ...formatChildren(s));
  const attempts = run.steps.flatMap((s) => s.attempts.map((a) => ({ step: s.stepSlug, a })));
  out.push(
    "",
    attempts.length === 0 ? "attempts  none ended other than by completing" : "attempts",
  );
  for (const { step, a } of attempts) out.push(...formatAttempt(step, a));
  return out;
}

/** How many child runs `runs show` lists per child-flow step; `--json` has them all. */
const CHILDREN_SHOWN = 20;

/** A child-flow step's child runs: "children of each (enrich_v1): 3 completed, 1 started", then ids. */
function formatChildren(s: StepState): string[] {
  const counts = new Map<string, number>();
  for (const c of s.children) {
    counts.set(c.status ?? "pruned", (counts.get(c.status ?? "pruned") ?? 0) + 1);
  }
  const summary = [...counts].map(([status, n]) => `${n} ${status}`).join(", ") || "none started";
  const lines = [`children of ${s.stepSlug} (flow ${s.childFlow}): ${summary}`];
  for (const c of s.children.slice(0, CHILDREN_SHOWN)) {
    lines.push(`  [${c.taskIndex}] ${c.runId} ${c.status ?? "pruned"}`);
  }
  if (s.children.length > CHILDREN_SHOWN) {
    lines.push(`  … ${s.children.length - CHILDREN_SHOWN} more (runs show <id> --json lists them)`);
  }
  return lines;
}

/**
 * A started step every unfinished task of which waits for capacity is `waiting`: no worker can
 * have it yet (it has no message), so it is neither queued nor lost.
 */
function shownStatus(s: StepState): string {
  if (s.status === "started" && s.wait !== null) return "waiting";
  const waiting = s.waiting.reduce((n, w) => n + w.tasks, 0);
  return s.status === "started" && waiting > 0 && waiting === s.remainingTasks
    ? "waiting"
    : s.status;
}

/**
 * An event step's or a sleep's wait: "waiting for event approved (key A-17) since …, until …",
 * "sleeping since … until …".
 */
export function waitNote(w: StepWait): string {
  const what = w.kind === "sleep"
    ? "sleeping"
    : `waiting for event ${w.event}${w.key === null ? "" : ` (key ${w.key})`}`;
  return `${what} since ${w.since ?? "-"}${w.until === null ? "" : `, until ${w.until}`}`;
}

/** "2 task(s) waiting since …: concurrency slack-api key C042: 1 of 1 in flight", per key. */
function waitingNote(waiting: readonly WaitingTasks[]): string {
  return waiting.map((w) => `${w.tasks} task(s) waiting since ${w.since}: ${w.reason}`)
    .join("; ");
}

function formatAttempt(step: string, a: TaskAttempt): string[] {
  const worker = a.workerId === null ? "worker ?" : `worker ${a.workerId.slice(0, 8)}`;
  const lines = [
    `  ${step}[${a.taskIndex}] #${a.attempt} ${a.outcome}  ${worker}  ${a.startedAt ?? "?"} → ` +
    `${a.endedAt ?? "?"}${a.errorMessage === null ? "" : `  ${oneLine(a.errorMessage, 200)}`}`,
  ];
  if (a.errorStack !== null) {
    const stack = a.errorStack.split("\n");
    lines.push(...stack.slice(0, STACK_LINES).map((l) => `      ${l.trimEnd()}`));
    if (stack.length > STACK_LINES) {
      lines.push(`      … ${stack.length - STACK_LINES} more line(s) (--json has them)`);
    }
  }
  return lines;
}

/**
 * A run for `--json`: everything `getRun` returns except input and outputs (a command line never
 * prints bodies; read them with `client.getRun` or `pgflow.get_run`).
 *
 * @example
 * ```ts
 * import { runJson } from "./format.ts";
 *
 * // console.log(JSON.stringify(runJson(await client.getRun(id))));
 * ```
 */
export function runJson(run: RunState): Record<string, unknown> {
  const { input: _input, output: _output, steps, ...rest } = run;
  return {
    ...rest,
    why: whyEnded(run),
    steps: steps.map(({ output: _o, ...step }) => step),
  };
}

/** Seconds between two of the engine's UTC times. */
function duration(from: string, to: string): string {
  const ms = Date.parse(to) - Date.parse(from);
  if (Number.isNaN(ms)) return "?";
  return ms < 10_000 ? `${(ms / 1000).toFixed(3)} s` : `${(ms / 1000).toFixed(1)} s`;
}

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, " ").trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

function table(header: string[], body: string[][]): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...body.map((r) => r[i].length)));
  const line = (cells: string[]) => cells.map((c, i) => c.padEnd(widths[i])).join("  ").trimEnd();
  return [line(header), ...body.map(line)];
}
