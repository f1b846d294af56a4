/**
 * What an operator sees of real worker processes: a startup error printed once (one JSON line, no
 * uncaught stack trace, exit code 1), a trigger without a secret logged (without any secret), and
 * `pgflow coverage` on a task whose worker was killed.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { runCli, shown } from "../cli/helpers.ts";
import { startRun } from "../worker/helpers.ts";
import { freePort, killChild, spawnDeno } from "./process.ts";

const db = testDatabase(import.meta.url);
const fixture = (name: string) => new URL(`./fixtures/${name}`, import.meta.url).pathname;

/** The environment of a child without the test process's own secrets or URLs. */
function clean(env: Record<string, string>): Record<string, string> {
  return { PGFLOW_AUTH_SECRET: "", SUPABASE_SERVICE_ROLE_KEY: "", EDGE_WORKER_DB_URL: "", ...env };
}

db.test("a worker that cannot start prints the error once and exits 1", async ({ url }) => {
  const wrong = new URL(url);
  wrong.pathname = "/no_such_database";
  const child = spawnDeno(fixture("plain_worker.ts"), clean({ DATABASE_URL: wrong.toString() }));
  const status = await child.exited;
  const output = child.output();
  assert.equal(status.code, 1, output);
  const lines = output.split("\n").filter((l) => l.includes("no_such_database"));
  assert.equal(lines.length, 1, `printed once:\n${output}`);
  const line = JSON.parse(lines[0]);
  assert.equal(line.level, "error");
  assert.equal(line.event, "worker failed to start");
  assert.doesNotMatch(output, /Uncaught|at async|\.ts:\d+:\d+/, "no stack trace");
});

db.test("a trigger with no secret answers 500 and says so in the log, once a minute", async ({ url }) => {
  const port = freePort();
  const child = spawnDeno(
    fixture("plain_worker.ts"),
    clean({ DATABASE_URL: url, EDGE_WORKER_TRIGGER: "http", PORT: String(port) }),
  );
  try {
    const ask = async () => {
      const response = await fetch(`http://127.0.0.1:${port}/e2e_plain`, {
        method: "POST",
        headers: { authorization: "Bearer some-guess-7f3a" },
      });
      const body = await response.json();
      return { status: response.status, body };
    };
    const first = await waitFor(async () => {
      try {
        return await ask();
      } catch {
        return undefined;
      }
    }, { what: `the trigger on port ${port}:\n${child.output()}`, timeoutMs: 60_000 });
    assert.equal(first.status, 500);
    assert.match(first.body.error, /set PGFLOW_AUTH_SECRET or SUPABASE_SERVICE_ROLE_KEY/);
    assert.equal((await ask()).status, 500);
    await waitFor(() => child.output().includes("trigger has no secret"), {
      what: "the log line",
    });
    const lines = child.output().split("\n").filter((l) => l.includes("trigger has no secret"));
    assert.equal(lines.length, 1, child.output());
    const line = JSON.parse(lines[0]);
    assert.equal(line.level, "error");
    assert.match(line.action, /PGFLOW_AUTH_SECRET/);
    assert.ok(!child.output().includes("some-guess-7f3a"), "the presented token is not logged");
  } finally {
    await killChild(child, "SIGTERM");
  }
});

db.test("coverage: a task held by a killed worker is MISSING, then STALE once a worker is back", async ({ sql, url }) => {
  const dead = spawnDeno(fixture("hanging_worker.ts"), clean({ DATABASE_URL: url, HANG: "1" }));
  let replacement: ReturnType<typeof spawnDeno> | undefined;
  try {
    const run = await startRun(sql, "recovery_flow", { id: "r1" }).catch(async () => {
      // The flow is compiled by the worker: wait for it first.
      await waitFor(
        async () =>
          (await sql`select 1 from pgflow.flows where flow_slug = 'recovery_flow'`).length > 0,
        {
          what: `the worker to compile its flow:\n${dead.output()}`,
          timeoutMs: 60_000,
        },
      );
      return await startRun(sql, "recovery_flow", { id: "r1" });
    });
    await waitFor(
      async () =>
        (await sql`select 1 from pgflow.step_tasks where run_id = ${run}::uuid and status = 'started'`)
          .length > 0,
      { what: "the task to start", timeoutMs: 60_000 },
    );
    await killChild(dead);

    const coverage = async () => {
      const out = await runCli(["coverage", "--database-url", url, "--stale-after", "1", "--json"]);
      const pair = JSON.parse(out.stdout).pairs.find((p: { flowSlug: string }) =>
        p.flowSlug === "recovery_flow"
      );
      return { code: out.code, pair, out };
    };
    // The killed worker's row still looks alive until its heartbeat is older than --stale-after.
    const missing = await waitFor(async () => {
      const c = await coverage();
      return c.pair?.status === "MISSING" ? c : undefined;
    }, { what: "MISSING", timeoutMs: 60_000 });
    assert.equal(missing.code, 1, shown(missing.out));
    assert.deepEqual(
      [missing.pair.startedTasks, missing.pair.staleTasks, missing.pair.liveWorkers],
      [1, 1, 0],
    );

    replacement = spawnDeno(fixture("hanging_worker.ts"), clean({ DATABASE_URL: url }));
    const stale = await waitFor(async () => {
      const c = await coverage();
      return c.pair?.status === "STALE" ? c : undefined;
    }, { what: `STALE:\n${replacement.output()}`, timeoutMs: 60_000 });
    assert.equal(stale.code, 0, shown(stale.out));
    assert.deepEqual([stale.pair.staleTasks, stale.pair.liveWorkers], [1, 1]);
  } finally {
    await killChild(dead);
    if (replacement) await killChild(replacement, "SIGTERM");
  }
});
