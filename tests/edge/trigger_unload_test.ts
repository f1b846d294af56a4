/**
 * The HTTP trigger at `beforeunload` (src/platform/trigger.ts), with a faked platform: the reason
 * reaches the worker's stop (so it starts nothing it claims from then on), a worker still starting
 * when the isolate is told to unload stops as soon as it has started, and an unloading isolate
 * starts no worker for a later request.
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

function fakeWorker(stops: (string | undefined)[]): TriggeredWorker {
  const done = Promise.withResolvers<void>();
  return {
    id: "w-1",
    functionName: "soak_a",
    done: done.promise,
    stop: (options) => {
      stops.push(options?.unloading);
      done.resolve();
      return done.promise;
    },
  };
}

Deno.test("trigger: beforeunload while the worker starts stops it as it starts, with the reason", async () => {
  let handler!: (request: Request) => Promise<Response>;
  let unload!: (reason?: string) => void;
  const kept: Promise<unknown>[] = [];
  const stops: (string | undefined)[] = [];
  const starting = Promise.withResolvers<TriggeredWorker>();
  let starts = 0;
  serveTrigger({
    serve: (h) => (handler = h),
    waitUntil: (p) => kept.push(p),
    onUnload: (l) => (unload = l),
    secret: "s",
    log: quiet,
    start: () => {
      starts++;
      return starting.promise;
    },
  });
  const first = handler(request());
  unload("CPUTime");
  starting.resolve(fakeWorker(stops));
  assert.equal((await first).status, 200);
  await Promise.all(kept);
  assert.deepEqual(stops, ["CPUTime"], "the worker that started after beforeunload was stopped");
  const later = await handler(request());
  assert.equal(later.status, 503);
  assert.equal(starts, 1, "no second worker in an isolate that is ending");
});

Deno.test("trigger: beforeunload's reason reaches a running worker's stop", async () => {
  let handler!: (request: Request) => Promise<Response>;
  let unload!: (reason?: string) => void;
  const kept: Promise<unknown>[] = [];
  const stops: (string | undefined)[] = [];
  serveTrigger({
    serve: (h) => (handler = h),
    waitUntil: (p) => kept.push(p),
    onUnload: (l) => (unload = l),
    secret: "s",
    log: quiet,
    start: () => Promise.resolve(fakeWorker(stops)),
  });
  assert.equal((await (await handler(request())).json()).status, "started");
  unload("WallClockTime");
  unload("WallClockTime");
  await Promise.all(kept);
  assert.deepEqual(stops, ["WallClockTime"]);
});
