/**
 * The telemetry tests' child processes, run to their end within bounds: Deno with `OTEL_DENO=true`
 * flushes its exporter on the way out, and a process that then hangs there (Deno's exporter, not
 * pgflow) is killed and said, while one that hangs before it finished its own work fails the test.
 */
import assert from "node:assert/strict";
import { type Child, exitWithin, spawnDeno } from "../e2e/process.ts";

const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname;

/** How long a child may take to exit once its work is done. */
const EXIT_MS = 60_000;

/** A run the traced client started: its id, its trace's id and the client's span's id. */
export interface ClientRun {
  readonly runId: string;
  readonly traceId: string;
  readonly spanId: string;
}

/** Runs `fixtures/traced_client.ts` with `env` to its end and returns the run it started. */
export async function runTracedClient(env: Record<string, string>): Promise<ClientRun> {
  const client = spawnDeno(fixture("traced_client.ts"), env);
  const exited = await exitWithin(client, EXIT_MS);
  const m = /^(\S+) ([0-9a-f]{32}) ([0-9a-f]{16})$/m.exec(client.output());
  assert.ok(m, `the client printed the run it started; output:\n${client.output()}`);
  if (!exited) {
    assert.match(
      client.output(),
      /^client closed$/m,
      `the client hung before it closed its pool; output:\n${client.output()}`,
    );
    console.warn(`the client had closed but did not exit within ${EXIT_MS} ms: killed`);
  }
  return { runId: m[1], traceId: m[2], spanId: m[3] };
}

/** Starts `fixtures/traced_worker.ts` with `env`. */
export function startTracedWorker(env: Record<string, string>): Child {
  return spawnDeno(fixture("traced_worker.ts"), env);
}

/** Stops a traced worker with SIGTERM, as a deploy would, and waits for it to exit. */
export async function stopTracedWorker(worker: Child): Promise<void> {
  if (await exitWithin(worker, EXIT_MS, "SIGTERM")) return;
  assert.match(
    worker.output(),
    /shutdown: stopped/,
    `the worker did not stop within ${EXIT_MS} ms of SIGTERM; output:\n${worker.output()}`,
  );
  console.warn(`the worker had stopped but did not exit within ${EXIT_MS} ms: killed`);
}
