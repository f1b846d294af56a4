import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Logger } from "../platform/logger.ts";

/**
 * One heartbeat: records that the worker is alive and returns whether it has been deprecated
 * (then it must stop polling and drain). Errors are logged and read as "not deprecated": a
 * missed heartbeat must not stop a healthy worker.
 */
export async function beat(
  sql: Sql,
  workerId: string,
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<boolean> {
  try {
    const [row] = await bounded(
      sql<{ deprecated: boolean }[]>`select pgflow.heartbeat(${workerId}::uuid) as deprecated`,
      "heartbeat",
      timeoutMs,
    );
    return row.deprecated === true;
  } catch (error) {
    log.warn("heartbeat failed", { error: (error as Error).message });
    return false;
  }
}
