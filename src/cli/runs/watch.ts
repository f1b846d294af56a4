/**
 * `pgflow runs watch`: one run's events, a line each, as they happen, until the run ends. Never
 * an input or an output: a step's completion is its name and time, an error its stored text.
 *
 * @module
 */
import type { PgflowClient } from "../../client/client.ts";
import type { RunEvent, RunStatus } from "../../client/types.ts";
import { result } from "../output.ts";

/** How a watch ended: the run's last status, or `null` when it was stopped first. */
export type WatchEnd = RunStatus | null;

/**
 * Prints run `runId`'s events (from its start) until it completes, fails or is cancelled, or
 * `signal` aborts; returns how it ended.
 *
 * @example
 * ```ts
 * import { watchRunEvents } from "./watch.ts";
 *
 * // const end = await watchRunEvents(client, runId, { json: false }); // "completed"
 * ```
 */
export async function watchRunEvents(
  client: PgflowClient,
  runId: string,
  options: { readonly json: boolean; readonly signal?: AbortSignal },
): Promise<WatchEnd> {
  let end: WatchEnd = null;
  for await (const event of client.run(runId).events({ signal: options.signal })) {
    result(options.json ? JSON.stringify(eventJson(event)) : eventLine(event));
    if (event.type === "run:completed") end = "completed";
    if (event.type === "run:failed") end = "failed";
    if (event.type === "run:cancelled") end = "cancelled";
  }
  return end;
}

/**
 * One event as a line: its time (UTC), its type, its step, and what it says (never a value the
 * run carries).
 *
 * @example
 * ```ts
 * import { eventLine } from "./watch.ts";
 *
 * eventLine({ runId: "…", at: "2026-12-05T08:00:00.123456Z", type: "step:started", stepSlug: "a" });
 * // "08:00:00.123  step:started    a"
 * ```
 */
export function eventLine(event: RunEvent): string {
  const time = event.at.slice(11, 23);
  const head = `${time}  ${event.type.padEnd(14)}`;
  switch (event.type) {
    case "run:started":
      return `${head}  ${event.flowSlug} (run ${event.runId})`;
    case "run:completed":
      return head.trimEnd();
    case "run:failed":
      return `${head}  ${event.stepSlug === null ? "" : `at ${event.stepSlug}: `}${event.error}`;
    case "run:cancelled":
      return `${head}  ${event.reason ?? "no reason given"}`;
    case "step:failed":
      return `${head}  ${event.stepSlug}: ${event.error}`;
    case "step:skipped":
      return `${head}  ${event.stepSlug} (${event.reason})`;
    default:
      return `${head}  ${event.stepSlug}`;
  }
}

/** An event for `--json`: everything but the input and outputs it may carry. */
function eventJson(event: RunEvent): Record<string, unknown> {
  const { input: _input, output: _output, ...rest } = event as RunEvent & {
    input?: unknown;
    output?: unknown;
  };
  return rest;
}
