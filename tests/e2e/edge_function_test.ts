/**
 * The example edge functions, started with plain `deno run` in HTTP-trigger mode (as on Supabase:
 * nothing polls until an authorised request arrives), process triage runs of both versions end to
 * end, then stop gracefully on SIGTERM.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, waitForRun } from "../worker/helpers.ts";
import { type Child, freePort, killChild, spawnDeno } from "./process.ts";

const db = testDatabase(import.meta.url);
const SECRET = "e2e-secret-token";

function fnScript(name: string): string {
  return new URL(`../../supabase/functions/${name}/index.ts`, import.meta.url).pathname;
}

async function trigger(port: number, name: string, token?: string): Promise<Response> {
  return await fetch(`http://127.0.0.1:${port}/${name}`, {
    method: "POST",
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
}

async function waitListening(port: number, child: Child): Promise<void> {
  await waitFor(async () => {
    try {
      const response = await trigger(port, "ping");
      await response.body?.cancel();
      return true;
    } catch {
      return false;
    }
  }, { what: `the function on port ${port}; output:\n${child.output()}`, timeoutMs: 60_000 });
}

db.test("example functions triggered over HTTP process runs end to end", async ({ sql, url }) => {
  const functions = ["thread_processing", "slack_delivery"].map((name) => {
    const port = freePort();
    const child = spawnDeno(fnScript(name), {
      DATABASE_URL: url,
      EDGE_WORKER_TRIGGER: "http",
      PORT: String(port),
      PGFLOW_AUTH_SECRET: SECRET,
      EDGE_WORKER_LOG_LEVEL: "info",
    });
    return { name, port, child };
  });
  try {
    for (const fn of functions) await waitListening(fn.port, fn.child);
    // Nothing runs before an authorised request.
    assert.equal((await sql`select 1 from pgflow.workers`).length, 0);
    for (const fn of functions) {
      const denied = await trigger(fn.port, fn.name);
      assert.equal(denied.status, 401);
      await denied.body?.cancel();
      const wrong = await trigger(fn.port, fn.name, "guess");
      assert.equal(wrong.status, 401);
      await wrong.body?.cancel();
    }
    assert.equal((await sql`select 1 from pgflow.workers`).length, 0);

    for (const fn of functions) {
      const response = await trigger(fn.port, fn.name, SECRET);
      const body = await response.json();
      assert.equal(response.status, 200, JSON.stringify(body));
      assert.equal(body.status, "started");
      assert.equal(body.functionName, fn.name);
      const again = await (await trigger(fn.port, fn.name, SECRET)).json();
      assert.deepEqual(again, { ...body, status: "running" });
    }
    const workers = await sql<{ queue_name: string; function_name: string }[]>`
      select queue_name, function_name from pgflow.workers order by queue_name`;
    assert.deepEqual(workers.map((w) => [w.queue_name, w.function_name]), [
      ["slack_delivery", "slack_delivery"],
      ["thread_processing", "thread_processing"],
    ]);

    const v1 = await startRun(sql, "thread_triage_v1", { threadId: "t1", text: "site is down" });
    const v2 = await startRun(sql, "thread_triage_v2", {
      threadId: "t2",
      text: "a small question",
    });
    assert.deepEqual(await waitForRun(sql, v1), {
      status: "completed",
      output: { deliverSlack: { delivered: false, text: "[urgent] thread t1" } },
    });
    assert.deepEqual(await waitForRun(sql, v2), {
      status: "completed",
      output: { deliverSlack: { delivered: false, text: "[P2.06] thread t2" } },
    });
    const ran = await sql<{ step_slug: string; queue_name: string; worker_queue: string }[]>`
      select t.step_slug, t.queue_name, w.queue_name as worker_queue
      from pgflow.step_tasks t join pgflow.workers w on w.worker_id = t.last_worker_id`;
    assert.equal(ran.length, 7);
    for (const task of ran) assert.equal(task.queue_name, task.worker_queue);

    // SIGTERM: graceful stop, worker rows marked stopped, clean exit.
    for (const fn of functions) fn.child.process.kill("SIGTERM");
    for (const fn of functions) {
      const status = await fn.child.exited;
      assert.equal(status.code, 0, fn.child.output());
      // Logs are structured and never carry message bodies or inputs.
      assert.equal(fn.child.output().includes("site is down"), false);
    }
    const stopped = await sql`select 1 from pgflow.workers where stopped_at is null`;
    assert.equal(stopped.length, 0);
  } finally {
    for (const fn of functions) await killChild(fn.child);
  }
});
