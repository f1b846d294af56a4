/**
 * Helpers for worker tests: real workers against the test database, with fast polling and logs
 * captured in memory so tests can assert on warnings and shutdown order.
 *
 * @module
 */
import {
  createLogger,
  createWorker,
  type EdgeWorkerConfig,
  type FlowWorker,
  type LogRecord,
  type WorkerTarget,
} from "../../mod.ts";
import type postgres from "postgres";
import assert from "node:assert/strict";
import { queueMessages } from "../support/engine.ts";

/** Fast polling for tests: reads wait at most 1 s, and re-check every 20 ms. */
export const FAST: EdgeWorkerConfig = Object.freeze({
  maxPollSeconds: 1,
  pollIntervalMs: 20,
  heartbeatIntervalMs: 200,
  stalledRecoveryIntervalMs: 0,
});

/** A worker plus the log records it wrote. */
export interface TestWorker {
  worker: FlowWorker;
  logs: LogRecord[];
}

/**
 * Creates and starts a worker on `url` with {@link FAST} settings; `stopAll` stops it.
 *
 * @example
 * ```ts
 * const { worker } = await startWorker(started, flow, { connectionString: url });
 * ```
 */
export async function startWorker(
  registry: FlowWorker[],
  target: WorkerTarget,
  config: Record<string, unknown>,
): Promise<TestWorker> {
  const logs: LogRecord[] = [];
  const logger = createLogger({ level: "debug", sink: (r) => logs.push(r) });
  // The typed selection is exercised by the type tests; here targets vary at run time.
  const worker = (createWorker as (t: WorkerTarget, c: Record<string, unknown>) => FlowWorker)(
    target,
    { ...FAST, logger, ...config },
  );
  registry.push(worker);
  await worker.start();
  return { worker, logs };
}

/** Stops every worker in `registry` (in parallel), ignoring ones that never started. */
export async function stopAll(registry: FlowWorker[]): Promise<void> {
  await Promise.all(registry.map((w) => w.stop()));
}

/** Starts a run and returns its id. */
export async function startRun(sql: postgres.Sql, flow: string, input: unknown): Promise<string> {
  const [row] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow(${flow}, ${JSON.stringify(input)}::text::jsonb)`;
  return row.run_id;
}

/** The run row (status, output). */
export async function runRow(
  sql: postgres.Sql,
  runId: string,
): Promise<{ status: string; output: unknown }> {
  const [row] = await sql<{ status: string; output: unknown }[]>`
    select status, output from pgflow.runs where run_id = ${runId}::uuid`;
  return row;
}

/** Polls until the run is no longer started; returns its row. */
export async function waitForRun(
  sql: postgres.Sql,
  runId: string,
  timeoutMs = 60_000,
): Promise<{ status: string; output: unknown }> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const row = await runRow(sql, runId);
    if (row.status !== "started") return row;
    if (Date.now() > deadline) throw new Error(`run ${runId} still started after ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 25));
  }
}

/**
 * Asserts that the one task of `runId` was never claimed (still queued, no attempt) and that no
 * worker read its message on `queue`.
 */
export async function assertUntouched(
  sql: postgres.Sql,
  runId: string,
  queue: string,
): Promise<void> {
  const [task] = await sql<{ status: string; attempts_count: number; message_id: string }[]>`
    select status, attempts_count, message_id::text as message_id
    from pgflow.step_tasks where run_id = ${runId}::uuid`;
  assert.deepEqual(
    { status: task.status, attempts: task.attempts_count },
    { status: "queued", attempts: 0 },
    "the task was not claimed",
  );
  const message = (await queueMessages(sql, queue))
    .find((m) => String(m.msg_id) === task.message_id);
  assert.equal(message?.read_ct, 0, "its message was never read");
}
