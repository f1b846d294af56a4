/**
 * `pgflow runs cancel|retry|resume`: on one run by id, or on the runs filters select, after
 * printing them, only with `--yes`. Each run's outcome is printed (text or JSON); the exit code
 * says whether all went as asked.
 *
 * @module
 */
import type { ListRunsOptions, PgflowClient } from "../../client/client.ts";
import { InputValidationError, RunActionError, RunNotFoundError } from "../../client/errors.ts";
import type { RestartMode, RunStatus, RunSummary } from "../../client/types.ts";
import { result, UsageError } from "../output.ts";

/** An action on runs. */
export type Action = "cancel" | "retry" | "resume";

/** The filters of a bulk action, checked, with the flow as a slug. */
export type Selection = ListRunsOptions & { readonly flow?: string; readonly limit: number };

/** What each action is called in output, and the statuses it acts on. */
export const ACTIONS: Readonly<
  Record<Action, { readonly done: string; readonly statuses: readonly RunStatus[] }>
> = {
  cancel: { done: "cancelled", statuses: ["started"] },
  retry: { done: "retried", statuses: ["failed", "cancelled"] },
  resume: { done: "resumed", statuses: ["failed", "cancelled"] },
};

/** How the action went for one run. */
export interface Outcome {
  readonly runId: string;
  readonly flowSlug: string | null;
  /** Its status after the action (the source's, for retry and resume), when known. */
  readonly status: RunStatus | null;
  /**
   * `cancelled`, `retried`, `resumed`; `already_ended` (cancel of a run that had ended: left as
   * it is); `already_restarted` (retry or resume of a run retried or resumed before, without
   * `--again`: left as it is, `restartedAs` names the newest run made from it); `refused` (the
   * database said no: `error`); `not_found`; `planned` (no `--yes`).
   */
  readonly outcome:
    | "cancelled"
    | "retried"
    | "resumed"
    | "already_ended"
    | "already_restarted"
    | "refused"
    | "not_found"
    | "planned";
  /** The new run of a retry or resume. */
  readonly newRunId?: string;
  /** For `already_restarted`: the newest run made from it, and how. */
  readonly restartedAs?: string;
  readonly restartMode?: RestartMode;
  readonly error?: string;
}

/** Options of {@link act}. */
export interface ActOptions {
  readonly reason: string | null;
  readonly yes: boolean;
  readonly json: boolean;
  /** Retry or resume runs that were retried or resumed before (without it they are skipped). */
  readonly again: boolean;
  /** A retry of one run: its new input (`undefined`: the source's). */
  readonly input?: unknown;
}

/** SQLSTATE of `retry_run` / `resume_run` with `again => false` for a run restarted already. */
const RESTARTED_ALREADY = "23505";

/**
 * Does `name` on run `selected` (an id) or on the runs it selects (filters); returns the exit code:
 * 0 all done, 1 refused for some run, 3 nothing matched or no such run, 4 not confirmed.
 *
 * @example
 * ```ts
 * import { act } from "./act.ts";
 *
 * // await act(client, "retry", { flow: "orders", status: "failed", limit: 100 }, { reason: null, yes: true, json: false });
 * ```
 */
export async function act(
  client: PgflowClient,
  name: Action,
  selected: string | Selection,
  options: ActOptions,
): Promise<number> {
  // Restarting a run restarted before starts one more run; only --again asks for that.
  const once = name !== "cancel" && !options.again;
  if (typeof selected === "string") {
    const outcome = await actOn(client, name, selected, null, options, once);
    report(name, [outcome], true, options.json);
    return outcome.outcome === "not_found" ? 3 : outcome.outcome === "refused" ? 1 : 0;
  }
  // One more than the limit, to tell "exactly the limit" from "more": acting on a part would
  // leave the rest to a second call.
  const found = await client.listRuns({
    ...selected,
    ...(once ? { restarted: false } : {}),
    limit: Math.min(selected.limit + 1, 1000),
  });
  const skipped = once
    ? (await client.listRuns({ ...selected, restarted: true, limit: 1000 })).map(restartedBefore)
    : [];
  if (found.length === 0) {
    // Nothing left to act on: every match was restarted before (or nothing matched).
    report(name, skipped, options.yes, options.json);
    return skipped.length === 0 ? 3 : 0;
  }
  if (found.length > selected.limit || found.length === 1000) {
    throw new UsageError(
      `more than ${Math.min(selected.limit, 999)} runs match; narrow the filters (--flow, ` +
        `--since, --id-prefix) or raise --limit (at most 1000) before ${
          name === "cancel" ? "cancelling" : name === "retry" ? "retrying" : "resuming"
        } them`,
    );
  }
  if (!options.yes) {
    report(
      name,
      [...found.map((r) => planned(r)), ...skipped],
      false,
      options.json,
      describeFilter(selected),
    );
    return 4;
  }
  const outcomes: Outcome[] = [];
  for (const run of found) {
    outcomes.push(await actOn(client, name, run.runId, run.flowSlug, options, once));
  }
  report(name, [...outcomes, ...skipped], true, options.json);
  return outcomes.some((o) => o.outcome === "refused" || o.outcome === "not_found") ? 1 : 0;
}

async function actOn(
  client: PgflowClient,
  name: Action,
  runId: string,
  flowSlug: string | null,
  options: ActOptions,
  once: boolean,
): Promise<Outcome> {
  const run = client.run(runId);
  try {
    if (name === "cancel") {
      const done = await run.cancel(options.reason ?? undefined);
      return {
        runId,
        flowSlug: done.flowSlug,
        status: done.status,
        outcome: done.cancelled ? "cancelled" : "already_ended",
      };
    }
    const again = { again: !once };
    const next = await (name === "retry"
      ? run.retry(options.input === undefined ? again : { ...again, input: options.input as never })
      : run.resume(again));
    return {
      runId,
      flowSlug: next.flowSlug,
      status: null,
      outcome: ACTIONS[name].done as Outcome["outcome"],
      newRunId: next.runId,
    };
  } catch (error) {
    if (error instanceof RunNotFoundError) {
      return { runId, flowSlug, status: null, outcome: "not_found" };
    }
    if (error instanceof InputValidationError) {
      return { runId, flowSlug, status: null, outcome: "refused", error: error.message };
    }
    if (error instanceof RunActionError && error.code === RESTARTED_ALREADY) {
      // Restarted meanwhile or before: say by which run (the refusal's message names it too).
      const source = await client.getRun(runId);
      if (source !== null && source.restarts.length > 0) {
        return restartedBefore(source);
      }
    }
    if (error instanceof RunActionError) {
      return {
        runId,
        flowSlug,
        status: error.status,
        outcome: "refused",
        error: error.message,
      };
    }
    throw error;
  }
}

function planned(r: RunSummary): Outcome {
  return { runId: r.runId, flowSlug: r.flowSlug, status: r.status, outcome: "planned" };
}

/** A run left alone because it was retried or resumed before (its newest restart first). */
function restartedBefore(
  r: Pick<RunSummary, "runId" | "flowSlug" | "status" | "restarts">,
): Outcome {
  const [newest] = r.restarts;
  return {
    runId: r.runId,
    flowSlug: r.flowSlug,
    status: r.status,
    outcome: "already_restarted",
    restartedAs: newest?.runId,
    restartMode: newest?.mode,
  };
}

/** Prints the outcomes: one JSON object, or a line per run and a summary. */
function report(
  name: Action,
  outcomes: readonly Outcome[],
  confirmed: boolean,
  json: boolean,
  filter?: string,
): void {
  if (json) {
    result(JSON.stringify({ action: name, confirmed, runs: outcomes }));
    return;
  }
  if (outcomes.length === 0) {
    result("no runs match; nothing was done");
    return;
  }
  const skipped = outcomes.filter((o) => o.outcome === "already_restarted");
  const planned = outcomes.filter((o) => o.outcome === "planned");
  if (!confirmed && planned.length > 0) {
    result(`would ${name} ${planned.length} run(s) (${filter}):`);
    for (const o of planned) result(`  ${o.runId}  ${o.flowSlug}  ${o.status}`);
    if (skipped.length > 0) {
      result(`and leave ${skipped.length} run(s) retried or resumed already:`);
      for (const o of skipped) result(`  ${line(o)}`);
    }
    result(`nothing was done; run the same command with --yes to ${name} them`);
    return;
  }
  for (const o of outcomes) result(line(o));
  if (outcomes.length > 1) {
    const done = outcomes.filter((o) => o.outcome === ACTIONS[name].done).length;
    const ended = outcomes.filter((o) => o.outcome === "already_ended").length;
    const failed = outcomes.length - done - ended - skipped.length;
    result(
      `${ACTIONS[name].done} ${done} of ${outcomes.length} run(s)` +
        (ended > 0 ? `; ${ended} had ended already` : "") +
        (skipped.length > 0 ? `; ${skipped.length} retried or resumed already` : "") +
        (failed > 0 ? `; ${failed} refused or gone` : ""),
    );
  }
}

function line(o: Outcome): string {
  const flow = o.flowSlug === null ? "" : ` (${o.flowSlug})`;
  switch (o.outcome) {
    case "cancelled":
      return `cancelled ${o.runId}${flow}`;
    case "already_ended":
      return `${o.runId}${flow} had ended already (${o.status}): left as it is`;
    case "retried":
    case "resumed":
      return `${o.outcome} ${o.runId}${flow}: new run ${o.newRunId}`;
    case "already_restarted":
      return `${o.runId}${flow} was ${o.restartMode === "retry" ? "retried" : "resumed"} ` +
        `already, as run ${o.restartedAs}: left as it is (--again restarts it once more)`;
    case "not_found":
      return `run ${o.runId} does not exist (or was pruned)`;
    default:
      return `refused ${o.runId}${flow}: ${o.error}`;
  }
}

function describeFilter(s: Selection): string {
  return [
    s.flow === undefined ? "any flow" : `flow ${s.flow}`,
    `status ${s.status}`,
    s.since === undefined ? undefined : `started since ${new Date(s.since).toISOString()}`,
    s.runIdPrefix === undefined ? undefined : `id starting ${s.runIdPrefix}`,
  ].filter((x) => x !== undefined).join(", ");
}
