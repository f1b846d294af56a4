/**
 * The runtime stand-in (runtime/supervisor.ts) itself: each limit ends an isolate with the
 * platform's reason, `beforeunload` first; an isolate with nothing pending is dropped early; and
 * an EdgeWorker that polls is not (it keeps a `waitUntil` promise pending), until the wall clock
 * ends it: then it stops polling, marks its row stopped and drains, before the kill.
 */
import assert from "node:assert/strict";
import { waitFor } from "../support/db.ts";
import { startEdgeCluster } from "./cluster.ts";
import { EdgeSupervisor, type IsolateRecord } from "./runtime/supervisor.ts";
import { ROOT_CONFIG, triggerFunction, workerFunction } from "./functions.ts";

const PROBE = {
  name: "probe",
  entry: new URL("./functions/probe/index.ts", import.meta.url).pathname,
  config: ROOT_CONFIG,
  env: {},
};

function reasons(record: IsolateRecord): string[] {
  return record.lines.flatMap((l) => {
    try {
      const parsed = JSON.parse(l.text);
      return parsed.event === "beforeunload" ? [parsed.reason] : [];
    } catch {
      return [];
    }
  });
}

async function ended(supervisor: EdgeSupervisor, id: string): Promise<IsolateRecord> {
  return await waitFor(() => {
    const record = supervisor.isolates.find((r) => r.id === id);
    return record?.end !== undefined ? record : undefined;
  }, { what: `isolate ${id} to end`, timeoutMs: 60_000 });
}

/** Calls the probe in `mode` and returns its isolate's record once it ended. */
async function probe(supervisor: EdgeSupervisor, mode: string): Promise<IsolateRecord> {
  const response = await fetch(`${supervisor.url}/functions/v1/probe?mode=${mode}`, {
    method: "POST",
  });
  assert.equal(await response.text(), "ok");
  return await ended(supervisor, supervisor.isolates.at(-1)!.id);
}

function assertEnded(record: IsolateRecord, mode: string, reason: string, cause: string): void {
  assert.equal(record.unload?.reason, reason, mode);
  assert.equal(record.end?.cause, cause, mode);
  assert.ok(record.unload!.at <= record.end!.at);
  // The function saw the reason before its end.
  assert.deepEqual(reasons(record), [reason], mode);
}

Deno.test("runtime stand-in: each limit ends an isolate with its reason, beforeunload first", async () => {
  // The CPU and memory limits are met under a wall clock far beyond them: CPU time accrues at the
  // share of a core a busy machine gives (`burn` needs 1,600 ms of it, 12 s of wall time at a
  // seventh of a core). The CPU limits leave `grow` room: filling 8 MB costs up to ~20 ms of CPU
  // on a loaded machine (page faults), and with a soft limit of 400 ms it reached CPUTime before
  // 200 MB when a second suite ran beside this one.
  const resources = new EdgeSupervisor({
    functions: [PROBE],
    limits: {
      wallClockMs: 120_000,
      unloadNoticeMs: 1_000,
      cpuSoftMs: 1_000,
      cpuHardMs: 1_600,
      memoryMb: 160,
      graceMs: 500,
    },
  });
  // The early drop and the wall clock, with a short wall clock (`hold` waits it out).
  const clock = new EdgeSupervisor({
    functions: [PROBE],
    limits: { wallClockMs: 8_000, unloadNoticeMs: 1_000, graceMs: 500 },
  });
  await resources.start();
  await clock.start();
  try {
    assertEnded(await probe(resources, "burn"), "burn", "CPUTime", "cpu hard");
    assertEnded(await probe(resources, "grow"), "grow", "Memory", "memory");
    assertEnded(await probe(clock, "plain"), "plain", "EarlyDrop", "drained");
    assertEnded(await probe(clock, "hold"), "hold", "WallClockTime", "drained");
    // SIGKILL: no beforeunload at all.
    await (await fetch(`${clock.url}/functions/v1/probe?mode=hold`, { method: "POST" }))
      .body?.cancel();
    const held = clock.isolates.at(-1)!;
    clock.kill(held.id);
    const killed = await ended(clock, held.id);
    assert.equal(killed.end?.cause, "sigkill");
    assert.deepEqual(reasons(killed), []);
  } finally {
    await clock.stop();
    await resources.stop();
  }
});

Deno.test("runtime stand-in: a polling EdgeWorker is not dropped early, and at the wall clock it stops, marks its row and drains", async () => {
  const cluster = await startEdgeCluster();
  const fn = workerFunction("thread_processing", cluster.url);
  const supervisor = new EdgeSupervisor({
    functions: [fn],
    limits: { wallClockMs: 14_000, unloadNoticeMs: 3_000, cpuSoftMs: 60_000, cpuHardMs: 60_000 },
  });
  await supervisor.start();
  try {
    const body = await triggerFunction(supervisor.url, fn);
    assert.equal(body.status, "started");
    const isolate = supervisor.isolates.find((r) => r.id === body.workerId)!;
    assert.ok(isolate !== undefined, "the worker id is the isolate's SB_EXECUTION_ID");
    // Idle and polling: far longer than an early drop takes (it is at once).
    await new Promise((r) => setTimeout(r, 3_000));
    assert.equal(isolate.unload?.reason, undefined, "a polling worker was dropped early");
    const record = await ended(supervisor, isolate.id);
    assert.equal(record.unload?.reason, "WallClockTime");
    assert.equal(record.end?.cause, "drained", "the worker drained before the kill");
    const [row] = await cluster.sql<{ stopped: boolean }[]>`
      select stopped_at is not null as stopped from pgflow.workers where worker_id = ${isolate.id}`;
    assert.equal(row.stopped, true);
    const events = record.lines.map((l) => JSON.parse(l.text).event);
    assert.ok(events.includes("shutdown: stopped"), events.join(", "));
  } finally {
    await supervisor.stop();
    await cluster.destroy();
  }
});
