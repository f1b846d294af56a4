/**
 * A flow with a concurrency-limited step, for the tests of how waiting tasks are shown (status,
 * runs show, the dashboard, the client).
 *
 * @module
 */
import type postgres from "postgres";
import { defineFlow } from "./engine.ts";

/**
 * Defines the routed one-step flow `slug` (step `s` on `queue`) whose step allows `limit` tasks
 * at once per value of the run input's `channel`.
 *
 * @example
 * ```ts
 * // await limitedFlow(sql, "slack_v1", "slack_delivery", 1);
 * // await sql`select pgflow.start_flow('slack_v1', '{"channel":"C042"}')`; // queued
 * // await sql`select pgflow.start_flow('slack_v1', '{"channel":"C042"}')`; // waiting
 * ```
 */
export async function limitedFlow(
  sql: postgres.Sql,
  slug: string,
  queue: string,
  limit: number,
): Promise<void> {
  await defineFlow(sql, slug, [{ slug: "s", queue }], { mode: "routed" });
  await sql`select pgflow.set_step_flow_control(${slug}, 's', priority => 0,
    concurrency => ${limit}, concurrency_key => '$.channel', concurrency_key_from => 'run',
    concurrency_scope => null)`;
}
