/**
 * `pgflow coverage` (and its alias `deno task coverage`, the same code): statuses in the table and
 * in `--json`, the exit code, and the database URL read in the worker's order.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart } from "../support/engine.ts";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("coverage: table and --json agree; exit 1 only while work waits without a worker", async ({ sql, url }) => {
  await defineFlow(sql, "cli_v1", [
    { slug: "classify", queue: "cli_shared" },
    { slug: "deliver", deps: ["classify"], queue: "cli_slack" },
  ], { mode: "routed" });
  const shared = crypto.randomUUID();
  await sql`select pgflow.register_worker(${shared}, 'cli_shared', 'fn_cli', '[["cli_v1", "classify"]]')`;

  // Routes without work: deliver has no worker but nothing waits for it, so it is idle.
  const idle = await runCli(["coverage", "--database-url", url]);
  assert.equal(idle.code, 0, shown(idle));
  assert.match(idle.stdout, /cli_shared\s+cli_v1\s+classify\s+yes\s+0\s+0\s+0\s+1\s+ok/);
  assert.match(idle.stdout, /cli_slack\s+cli_v1\s+deliver\s+yes\s+0\s+0\s+0\s+0\s+idle/);

  // A run whose deliver task waits: MISSING, exit 1, and the note says what to do.
  const [{ run_id: run }] = await sql`select run_id from pgflow.start_flow('cli_v1', '{}')`;
  const [task] = await readAndStart(sql, "cli_shared", shared, [["cli_v1", "classify"]]);
  await sql`select pgflow.complete_task(${run}, 'classify', 0, '1', ${task.attempt})`;
  const missing = await runCli(["coverage", "--database-url", url]);
  assert.equal(missing.code, 1, shown(missing));
  assert.match(missing.stdout, /cli_slack\s+cli_v1\s+deliver\s+yes\s+1\s+0\s+0\s+0\s+MISSING/);
  assert.match(missing.stdout, /1 pair\(s\) MISSING: work is waiting and no live worker serves it/);

  const json = await runCli(["coverage", "--database-url", url, "--json"]);
  assert.equal(json.code, 1, shown(json));
  const parsed = JSON.parse(json.stdout);
  assert.deepEqual(parsed.counts, { MISSING: 1, STALE: 0, PARTIAL: 0, ok: 1, idle: 0 });
  assert.deepEqual(parsed.pairs, [
    {
      queueName: "cli_shared",
      flowSlug: "cli_v1",
      stepSlug: "classify",
      routed: true,
      queuedTasks: 0,
      startedTasks: 0,
      staleTasks: 0,
      liveWorkers: 1,
      served: true,
      status: "ok",
    },
    {
      queueName: "cli_slack",
      flowSlug: "cli_v1",
      stepSlug: "deliver",
      routed: true,
      queuedTasks: 1,
      startedTasks: 0,
      staleTasks: 0,
      liveWorkers: 0,
      served: false,
      status: "MISSING",
    },
  ]);

  await sql`select pgflow.register_worker(gen_random_uuid(), 'cli_slack', 'fn_cli', '[["cli_v1", "deliver"]]')`;
  const covered = await runCli([
    "coverage",
    "--database-url",
    url,
    "--queue",
    "cli_slack",
    "--json",
  ]);
  assert.equal(covered.code, 0, shown(covered));
  assert.deepEqual(
    JSON.parse(covered.stdout).pairs.map((p: { status: string }) => p.status),
    ["ok"],
  );

  const bad = await runCli(["coverage", "--database-url", url, "--queue"]);
  assert.equal(bad.code, 2, shown(bad));
});

db.test("coverage reads EDGE_WORKER_DB_URL before DATABASE_URL, as the worker does", async ({ url }) => {
  const refused = "postgres://postgres@127.0.0.1:1/postgres";
  const both = await runCli(["coverage", "--json"], {
    env: { EDGE_WORKER_DB_URL: url, DATABASE_URL: refused },
  });
  assert.equal(both.code, 0, shown(both));
  // One database per file: the first test's pairs are here.
  assert.deepEqual(Object.keys(JSON.parse(both.stdout)), ["pairs", "counts"]);
  const swapped = await runCli(["coverage"], {
    env: { EDGE_WORKER_DB_URL: refused, DATABASE_URL: url },
  });
  assert.notEqual(swapped.code, 0, shown(swapped));
  assert.match(swapped.stderr, /127\.0\.0\.1:1: connection refused/);
  // An empty value counts as unset, for the CLI as for the worker.
  const empty = await runCli(["coverage", "--json"], {
    env: { EDGE_WORKER_DB_URL: "", DATABASE_URL: url },
  });
  assert.equal(empty.code, 0, shown(empty));
});

db.test("deno task coverage is the same command", async ({ url }) => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["task", "--quiet", "coverage", "--json"],
    cwd: REPO_ROOT,
    env: { EDGE_WORKER_DB_URL: url, NO_COLOR: "1" },
    stdout: "piped",
    stderr: "piped",
  }).output();
  const stdout = new TextDecoder().decode(out.stdout);
  assert.equal(out.code, 0, stdout + new TextDecoder().decode(out.stderr));
  assert.deepEqual(Object.keys(JSON.parse(stdout).counts), [
    "MISSING",
    "STALE",
    "PARTIAL",
    "ok",
    "idle",
  ]);
});
