/** The HTTP trigger and bearer check, with a faked platform (no globals, no database). */
import assert from "node:assert/strict";
import { createLogger } from "../../mod.ts";
import { checkBearer, expectedSecret, timingSafeEqual } from "../../src/platform/auth.ts";
import {
  functionNameFromUrl,
  serveTrigger,
  type TriggeredWorker,
} from "../../src/platform/trigger.ts";

const quiet = createLogger({ sink: () => {} });

function request(token?: string, path = "/thread_processing"): Request {
  const headers: Record<string, string> = token === undefined
    ? {}
    : { authorization: `Bearer ${token}` };
  return new Request(`http://localhost${path}`, { method: "POST", headers });
}

Deno.test("bearer: PGFLOW_AUTH_SECRET, else the service-role key; empty counts as unset", () => {
  assert.equal(expectedSecret({ PGFLOW_AUTH_SECRET: "s", SUPABASE_SERVICE_ROLE_KEY: "k" }), "s");
  assert.equal(expectedSecret({ PGFLOW_AUTH_SECRET: "", SUPABASE_SERVICE_ROLE_KEY: "k" }), "k");
  assert.equal(expectedSecret({}), undefined);
  assert.deepEqual(checkBearer(request("s"), "s"), { ok: true });
  assert.equal((checkBearer(request("x"), "s") as { status: number }).status, 401);
  assert.equal((checkBearer(request("ss"), "s") as { status: number }).status, 401);
  assert.equal((checkBearer(request(), "s") as { status: number }).status, 401);
  assert.equal((checkBearer(request("s"), undefined) as { status: number }).status, 500);
  assert.equal(timingSafeEqual("abc", "abc"), true);
  assert.equal(timingSafeEqual("abc", "abd"), false);
  assert.equal(timingSafeEqual("", "a"), false);
});

Deno.test("function name comes from the first path segment", () => {
  assert.equal(functionNameFromUrl("http://x/thread_processing"), "thread_processing");
  assert.equal(functionNameFromUrl("http://x/slack_delivery/ping"), "slack_delivery");
  assert.equal(functionNameFromUrl("http://x/functions/v1/slack_delivery"), "slack_delivery");
  assert.equal(functionNameFromUrl("http://x/"), undefined);
});

Deno.test("trigger: starts on the first authorised request, retries a failed start, stops on unload", async () => {
  let handler!: (request: Request) => Promise<Response>;
  let unload!: () => void;
  const kept: Promise<unknown>[] = [];
  let attempts = 0;
  let stopped = 0;
  let finish!: () => void;
  const done = new Promise<void>((r) => (finish = r));
  serveTrigger({
    serve: (h) => (handler = h),
    waitUntil: (p) => kept.push(p),
    onUnload: (l) => (unload = l),
    secret: "s3cret",
    log: quiet,
    create: (functionName): TriggeredWorker => ({
      id: "w-1",
      functionName: functionName ?? "?",
      done,
      start: () => {
        attempts++;
        return attempts === 1 ? Promise.reject(new Error("flow x: mismatch")) : Promise.resolve();
      },
      stop: () => {
        stopped++;
        finish();
        return done;
      },
    }),
  });
  assert.equal((await handler(request())).status, 401);
  assert.equal((await handler(request("wrong"))).status, 401);
  assert.equal(attempts, 0, "unauthorised requests start nothing");
  const failed = await handler(request("s3cret"));
  assert.equal(failed.status, 500);
  assert.deepEqual(await failed.json(), { status: "failed", error: "flow x: mismatch" });
  const first = await handler(request("s3cret"));
  assert.deepEqual(await first.json(), {
    status: "started",
    workerId: "w-1",
    functionName: "thread_processing",
  });
  assert.equal((await (await handler(request("s3cret"))).json()).status, "running");
  assert.equal(attempts, 2);
  assert.equal(kept.length, 1, "the isolate is kept alive while the worker runs");
  unload();
  await done;
  assert.equal(stopped, 1);
  assert.equal(kept.length, 2, "the graceful stop is kept alive too");
  await Promise.resolve();
  const after = await handler(request("s3cret"));
  assert.equal(after.status, 503);
  assert.equal((await after.json()).status, "stopped");
  assert.equal(attempts, 2, "a stopped worker is not restarted in the same isolate");
});
