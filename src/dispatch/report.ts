import type postgres from "postgres";
import type { ClaimedTask } from "../claim/claim.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";

/**
 * The exact JSON text of a handler's output: `0`, `false`, `""` and `null` stay what they are;
 * `undefined` (a handler that returns nothing) becomes JSON `null`. Throws for values JSON cannot
 * hold (a function, a bigint, a cycle), which fails the task instead of storing something else.
 */
export function outputJson(output: unknown): string {
  if (output === undefined) return "null";
  const text = JSON.stringify(output);
  if (text === undefined) {
    throw new TypeError(`handler output is not JSON (got ${typeof output}); return JSON values`);
  }
  return text;
}

/** The text `fail_task` records for a thrown value. */
export function errorMessage(error: unknown): string {
  if (error instanceof Error) return error.message || error.name;
  if (typeof error === "string") return error;
  try {
    return JSON.stringify(error) ?? String(error);
  } catch {
    return String(error);
  }
}

/**
 * `pgflow.complete_task` with the exact output text. Late or duplicate calls are ignored by SQL.
 * The text is cast `::text::jsonb` on purpose: a parameter typed jsonb would be JSON-encoded again
 * by postgres.js, and a JS `null` would become SQL NULL instead of JSON `null`.
 */
export async function completeTask(
  sql: postgres.Sql,
  task: ClaimedTask,
  output: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  // The attempt makes a late retry of this report harmless once the task was claimed again.
  await bounded(
    sql`select pgflow.complete_task(${task.runId}::uuid, ${task.stepSlug}, ${task.taskIndex}::integer,
                                    ${output}::text::jsonb, ${task.attempt}::integer)`,
    "complete_task",
    timeoutMs,
  );
}

/** `pgflow.fail_task`: SQL decides between a retry and exhaustion. */
export async function failTask(
  sql: postgres.Sql,
  task: ClaimedTask,
  message: string,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  await bounded(
    sql`select pgflow.fail_task(${task.runId}::uuid, ${task.stepSlug}, ${task.taskIndex}::integer,
                                ${message}, ${task.attempt}::integer)`,
    "fail_task",
    timeoutMs,
  );
}
