/**
 * The HTTP trigger at `beforeunload` (src/platform/trigger.ts), with a faked platform: the reason
 * reaches the worker's stop (so it starts nothing it claims from then on), a worker still starting
 * when the isolate is told to unload is told at once (it ends its startup before its first read),
 * and an unloading isolate starts no worker for a later request.
 */
import assert from "node:assert/strict";
import { createLogger } from "../../mod.ts";
import { serveTrigger, type TriggeredWorker } from "../../src/platform/trigger.ts";

const quiet = createLogger({ sink: () => {} });

function request(): Request {
  return new Request("http://localhost/soak_a", {
    method: "POST",
    headers: { authorization: "Bearer s" },
  });
}

/**
 * A worker whose startup ends only when it is told to stop, as a real one told during its startup
 * (`startup` resolves it otherwise); `events` records the order of things.
 */
function fakeWorker(events: string[], startup?: Promise<void>): TriggeredWorker {
  const done = Promise.withResolvers<void>();
  const stopped = Promise.withResolvers<void>();
  return {
    id: "w-1",
    functionName: "soak_a",
    done: done.promise,
    start: async () => {
      events.push("start");
      await Promise.race([stopped.promise, startup ?? new Promise(() => {})]);
      events.push("started");
    },
    stop: (options) => {
      events.push(`stop ${options?.unloading}`);
      stopped.resolve();
      done.resolve();
      return done.promise;
    },
  };
}

Deno.test("trigger: beforeunload while the worker starts reaches it at once, with the reason", async () => {
  let handler!: (request: Request) => Promise<Response>;
  let unload!: (reason?: string) => void;
  const kept: Promise<unknown>[] = [];
  const events: string[] = [];
  let made = 0;
  serveTrigger({
    serve: (h) => (handler = h),
    waitUntil: (p) => kept.push(p),
    onUnload: (l) => (unload = l),
    secret: "s",
    log: quiet,
    create: () => {
      made++;
      return fakeWorker(events);
    },
  });
  const first = handler(request());
  await Promise.resolve();
  unload("CPUTime");
  const answer = await first;
  assert.deepEqual(
    events,
    ["start", "stop CPUTime", "started"],
    "the worker was told before its startup ended, not after",
  );
  assert.equal(answer.status, 503);
  assert.deepEqual(await answer.json(), { status: "unloading", reason: "CPUTime" });
  await Promise.all(kept);
  const later = await handler(request());
  assert.equal(later.status, 503);
  assert.equal(made, 1, "no second worker in an isolate that is ending");
});

Deno.test("trigger: beforeunload's reason reaches a running worker's stop", async () => {
  let handler!: (request: Request) => Promise<Response>;
  let unload!: (reason?: string) => void;
  const kept: Promise<unknown>[] = [];
  const events: string[] = [];
  serveTrigger({
    serve: (h) => (handler = h),
    waitUntil: (p) => kept.push(p),
    onUnload: (l) => (unload = l),
    secret: "s",
    log: quiet,
    create: () => fakeWorker(events, Promise.resolve()),
  });
  assert.equal((await (await handler(request())).json()).status, "started");
  unload("WallClockTime");
  unload("WallClockTime");
  await Promise.all(kept);
  assert.deepEqual(events, ["start", "started", "stop WallClockTime"]);
});
