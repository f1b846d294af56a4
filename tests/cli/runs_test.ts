/**
 * `pgflow runs list|show|cancel|retry|resume` as a user runs it (a process), against a real
 * database: the table and the JSON, one run in full with its attempts, actions on one run and on
 * many (a plan without --yes, the actions with it), the exit codes, and one-line usage errors.
 */
import assert from "node:assert/strict";
import type { FlowWorker } from "../../mod.ts";
import { failing } from "../client/fixtures.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { startRun, startWorker, stopAll } from "../worker/helpers.ts";
import { BAD_URLS, SECRET } from "../platform/bad_urls.ts";
import { runCli, shown } from "./helpers.ts";
import { limitedFlow } from "../support/flow_control.ts";

const db = testDatabase(import.meta.url);

/** Runs `pgflow runs <args>` on `url`. */
const runs = (url: string, ...args: string[]) => runCli(["runs", ...args, "--database-url", url]);

/** Two failed runs of cl_failing (a worker runs them) and three started runs of cli_idle. */
async function setUp(sql: Parameters<Parameters<typeof db.test>[1]>[0]["sql"], url: string) {
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, failing, { connectionString: url });
    const failed = [
      await startRun(sql, "cl_failing", { id: 1 }),
      await startRun(sql, "cl_failing", { id: 2 }),
    ];
    await waitFor(async () => {
      const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                                where flow_slug = 'cl_failing' and status = 'failed'`;
      return n === 2;
    }, { what: "two failed runs" });
    await sql`select pgflow.create_flow('cli_idle')`;
    await sql`select pgflow.add_step('cli_idle', 'wait')`;
    const idle = [];
    for (let i = 0; i < 3; i++) idle.push(await startRun(sql, "cli_idle", { i }));
    return { failed, idle };
  } finally {
    await stopAll(workers);
  }
}

db.test(
  "runs list and show: a table, filters, JSON, one run in full with its attempts, exit 3 when nothing matches",
  async ({ sql, url }) => {
    const { failed, idle } = await setUp(sql, url);
    const all = await runs(url, "list");
    assert.equal(all.code, 0, shown(all));
    const lines = all.stdout.trim().split("\n");
    assert.match(
      lines[0],
      /^run id\s+flow\s+status\s+started\s+ended\s+restart of\s+restarted as\s+error$/,
    );
    assert.equal(lines.length, 6);
    assert.ok(lines[1].startsWith(idle[2]), "newest first");
    assert.match(
      all.stdout,
      new RegExp(
        `${failed[0]}\\s+cl_failing\\s+failed\\s+\\S+\\s+\\S+\\s+-\\s+-\\s+.*disk is on fire`,
      ),
    );

    const json = await runs(
      url,
      "list",
      "--flow",
      "cl_failing",
      "--status",
      "failed",
      "--since",
      "1h",
      "--json",
    );
    assert.equal(json.code, 0, shown(json));
    const listed = JSON.parse(json.stdout).runs as { runId: string; status: string }[];
    assert.deepEqual(listed.map((r) => r.runId).sort(), [...failed].sort());
    assert.ok(listed.every((r) => r.status === "failed"));
    const one = await runs(url, "list", "--limit", "1", "--id-prefix", idle[0].slice(0, 8));
    assert.equal(one.code, 0, shown(one));
    assert.equal(one.stdout.trim().split("\n").length, 2);
    const none = await runs(url, "list", "--since", "2099-01-01");
    assert.equal(none.code, 3, shown(none));
    assert.match(none.stdout, /^no runs match$/m);

    const show = await runs(url, "show", failed[0]);
    assert.equal(show.code, 0, shown(show));
    assert.match(show.stdout, new RegExp(`^run\\s+${failed[0]}$`, "m"));
    assert.match(show.stdout, /^status\s+failed$/m);
    assert.match(show.stdout, /^why\s+failed at step explode: .*the disk is on fire$/m);
    assert.match(show.stdout, /^\s+check\s+single\s+completed\s+1\/1/m);
    assert.match(show.stdout, /^\s+never\s+single\s+created\s/m);
    assert.match(
      show.stdout,
      /^\s+explode\[0\] #1 failed\s+worker [0-9a-f]{8}\s+\S+ → \S+\s+.*disk is on fire$/m,
    );
    assert.doesNotMatch(show.stdout, /"id":1|\{"id"/, "no input or output");
    const showJson = await runs(url, "show", failed[0], "--json");
    assert.equal(showJson.code, 0, shown(showJson));
    const { run } = JSON.parse(showJson.stdout);
    assert.equal(run.status, "failed");
    assert.equal("input" in run || "output" in run, false);
    assert.match(run.why, /failed at step explode/);
    assert.match(run.steps[1].attempts[0].errorStack, /^Error: the disk is on fire\n\s+at /);
    assert.equal(run.steps[1].attempts[0].outcome, "failed");

    // A stack (sent here through fail_task): its first lines in text, all of it in JSON.
    await defineFlow(sql, "cli_hist", [{ slug: "a" }], { maxAttempts: 1 });
    const histRun = await startRun(sql, "cli_hist", {});
    const [t] = await readAndStart(sql, "cli_hist", await registerWorker(sql, "cli_hist"), [[
      "cli_hist",
      "a",
    ]]);
    const stack = [
      "Error: api down",
      ...Array.from({ length: 11 }, (_, i) => `    at f${i} (h.ts:${i}:1)`),
    ];
    await sql`select pgflow.fail_task(${histRun}::uuid, 'a', 0, 'api down', ${t.attempt}, ${
      stack.join("\n")
    })`;
    const hist = await runs(url, "show", histRun);
    assert.equal(hist.code, 0, shown(hist));
    assert.match(hist.stdout, /^\s+a\[0\] #1 failed\s+worker [0-9a-f]{8}\s+\S+ → \S+\s+api down$/m);
    assert.match(hist.stdout, /^\s{6}Error: api down\n\s{6}\s+at f0 \(h\.ts:0:1\)$/m);
    assert.match(hist.stdout, /at f6 \(h\.ts:6:1\)\n\s+… 4 more line\(s\) \(--json has them\)$/m);
    assert.doesNotMatch(hist.stdout, /at f7/);
    const histJson = JSON.parse((await runs(url, "show", histRun, "--json")).stdout);
    assert.equal(histJson.run.steps[0].attempts[0].errorStack, stack.join("\n"));

    const missing = await runs(url, "show", crypto.randomUUID());
    assert.equal(missing.code, 3, shown(missing));
    assert.match(missing.stderr, /does not exist/);
  },
  { fresh: true },
);

db.test(
  "runs cancel, retry and resume of one run: what happened, and exit codes 0, 1 and 3",
  async ({ sql, url }) => {
    const { failed, idle } = await setUp(sql, url);
    const cancel = await runs(url, "cancel", idle[0], "--reason", "wrong input");
    assert.equal(cancel.code, 0, shown(cancel));
    assert.equal(cancel.stdout.trim(), `cancelled ${idle[0]} (cli_idle)`);
    const [row] = await sql`select status, cancel_reason from pgflow.runs where run_id = ${
      idle[0]
    }::uuid`;
    assert.deepEqual({ ...row }, { status: "cancelled", cancel_reason: "wrong input" });
    const again = await runs(url, "cancel", idle[0], "--json");
    assert.equal(again.code, 0, shown(again));
    assert.deepEqual(JSON.parse(again.stdout), {
      action: "cancel",
      confirmed: true,
      runs: [{
        runId: idle[0],
        flowSlug: "cli_idle",
        status: "cancelled",
        outcome: "already_ended",
      }],
    });

    const refused = await runs(url, "retry", idle[1]);
    assert.equal(refused.code, 1, shown(refused));
    assert.match(
      refused.stdout,
      new RegExp(`^refused ${idle[1]}: .*only failed or cancelled runs`, "m"),
    );
    const unknown = crypto.randomUUID();
    const gone = await runs(url, "resume", unknown);
    assert.equal(gone.code, 3, shown(gone));
    assert.match(gone.stdout, new RegExp(`run ${unknown} does not exist`));

    const retry = await runs(url, "retry", failed[0]);
    assert.equal(retry.code, 0, shown(retry));
    const newId = /new run ([0-9a-f-]{36})$/.exec(retry.stdout.trim())?.[1];
    assert.ok(newId, retry.stdout);
    const resume = await runs(url, "resume", failed[1], "--json");
    assert.equal(resume.code, 0, shown(resume));
    const [resumed] = JSON.parse(resume.stdout).runs;
    assert.equal(resumed.outcome, "resumed");
    const lineage = await sql`select run_id, restart_of_run_id, restart_mode from pgflow.runs
                            where restart_of_run_id is not null order by restart_mode desc`;
    assert.deepEqual(lineage.map((r) => [r.run_id, r.restart_of_run_id, r.restart_mode]), [
      [newId, failed[0], "retry"],
      [resumed.newRunId, failed[1], "resume"],
    ]);
    const [src] = await sql`select count(*)::int as n from pgflow.runs
                          where run_id in ${sql(failed)} and status = 'failed'`;
    assert.equal(src.n, 2, "the sources are unchanged");
  },
  { fresh: true },
);

db.test(
  "bulk forms print what they would do and act only with --yes; too many, none and bad values are refused",
  async ({ sql, url }) => {
    const { failed, idle } = await setUp(sql, url);
    const before = await sql`select run_id, status from pgflow.runs order by run_id`;
    const plan = await runs(url, "cancel", "--flow", "cli_idle");
    assert.equal(plan.code, 4, shown(plan));
    assert.match(plan.stdout, /^would cancel 3 run\(s\) \(flow cli_idle, status started\):$/m);
    for (const id of idle) {
      assert.match(plan.stdout, new RegExp(`^  ${id}  cli_idle  started$`, "m"));
    }
    assert.match(plan.stdout, /nothing was done; run the same command with --yes to cancel them/);
    assert.deepEqual(await sql`select run_id, status from pgflow.runs order by run_id`, before);

    const tooMany = await runs(url, "cancel", "--flow", "cli_idle", "--limit", "2", "--yes");
    assert.equal(tooMany.code, 2, shown(tooMany));
    assert.match(tooMany.stderr, /more than 2 runs match; narrow the filters .* or raise --limit/);
    assert.deepEqual(await sql`select run_id, status from pgflow.runs order by run_id`, before);

    const done = await runs(
      url,
      "cancel",
      "--flow",
      "cli_idle",
      "--reason",
      "cleanup",
      "--yes",
      "--json",
    );
    assert.equal(done.code, 0, shown(done));
    const out = JSON.parse(done.stdout);
    assert.equal(out.confirmed, true);
    assert.deepEqual(out.runs.map((r: { outcome: string }) => r.outcome), [
      "cancelled",
      "cancelled",
      "cancelled",
    ]);
    const nothing = await runs(url, "cancel", "--flow", "cli_idle");
    assert.equal(nothing.code, 3, shown(nothing));
    assert.match(nothing.stdout, /no runs match; nothing was done/);

    const retryPlan = await runs(
      url,
      "retry",
      "--flow",
      "cl_failing",
      "--status",
      "failed",
      "--since",
      "1h",
    );
    assert.equal(retryPlan.code, 4, shown(retryPlan));
    const retried = await runs(url, "retry", "--flow", "cl_failing", "--since", "1h", "--yes");
    assert.equal(retried.code, 0, shown(retried));
    for (const id of failed) {
      assert.match(
        retried.stdout,
        new RegExp(`^retried ${id} \\(cl_failing\\): new run [0-9a-f-]{36}$`, "m"),
      );
    }
    assert.match(retried.stdout, /^retried 2 of 2 run\(s\)$/m);
    // Cancelled runs can be resumed too.
    const resumed = await runs(
      url,
      "resume",
      "--flow",
      "cli_idle",
      "--status",
      "cancelled",
      "--yes",
    );
    assert.equal(resumed.code, 0, shown(resumed));
    assert.match(resumed.stdout, /^resumed 3 of 3 run\(s\)$/m);

    for (
      const [args, message] of [
        [
          ["show", "run-1"],
          /pgflow runs show: "run-1" is not a run id; pass a run id as "pgflow runs list" prints it \(0b6c1d2e-7f00-4a1b-8c2d-3e4f5a6b7c8d\) or its start/,
        ],
        [
          ["list", "--status", "done"],
          /--status "done" is not a run status; use one of started, completed, failed, cancelled/,
        ],
        [
          ["list", "--since", "yesterday"],
          /--since "yesterday" is neither a duration nor a time; pass how long ago \(30m, 1h, 2d, 1w\)/,
        ],
        // Past the year 1 the database refused the time (22009, exit 1): now a usage error.
        [
          ["list", "--since", "999999d"],
          /--since "999999d" reaches back before the year 1; times from 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z are accepted, so at most \d+d ago/,
        ],
        [["list", "--since", "2026-02-31"], /--since "2026-02-31" is not a date: February 2026/],
        [["list", "--limit", "0"], /--limit must be a whole number from 1 to 1000, got "0"/],
        [
          ["retry", "--status", "started", "--flow", "x"],
          /retry acts on failed or cancelled runs; --status started/,
        ],
        [["cancel"], /cancel needs a run id, or filters/],
        [["cancel", failed[0], "--flow", "x"], /takes a run id or filters, not both/],
        [["frobnicate"], /unknown subcommand "frobnicate" of pgflow runs/],
      ] as const
    ) {
      const bad = await runs(url, ...args);
      assert.equal(bad.code, 2, shown(bad));
      assert.equal(bad.stderr.trim().split("\n").length, 1, shown(bad));
      assert.match(bad.stderr, message);
    }
  },
  { fresh: true },
);

Deno.test("runs --help documents the subcommands and exit codes; the top-level help lists runs", async () => {
  const help = await runCli(["runs", "--help"]);
  assert.equal(help.code, 0, shown(help));
  assert.match(
    help.stdout,
    /Exit codes: 0 done .*, 1 .*, 2 usage error .*, 3 nothing\s+matched \/ no such run, 4 a bulk action without --yes/s,
  );
  const top = await runCli(["--help"]);
  assert.match(
    top.stdout,
    /^ {2}runs\s+list \| show \| start \| watch \| cancel \| retry \| resume/m,
  );
});

Deno.test("runs: a malformed --database-url is one usage line without the password; an unreachable one exit 1", async () => {
  for (const argv of [["list"], ["show", crypto.randomUUID()], ["cancel", crypto.randomUUID()]]) {
    for (const bad of BAD_URLS.slice(0, 3)) {
      const run = await runCli(["runs", ...argv, "--database-url", bad.url]);
      assert.equal(run.code, 2, shown(run));
      assert.match(run.stderr, /^pgflow: error: --database-url [^\n]*\n$/, shown(run));
      assert.match(run.stderr, bad.says);
      assert.doesNotMatch(run.stdout + run.stderr, SECRET);
    }
  }
  const refused = await runCli([
    "runs",
    "list",
    "--database-url",
    "postgres://app:s3cret-pw@127.0.0.1:1/postgres",
  ]);
  assert.equal(refused.code, 1, shown(refused));
  assert.match(refused.stderr, /could not connect to 127\.0\.0\.1:1: connection refused/);
  assert.doesNotMatch(refused.stdout + refused.stderr, SECRET);
});

db.test("runs show: a step whose task waits for a concurrency limit is waiting, with its key, since when and why; --json has it", async ({ sql, url }) => {
  await limitedFlow(sql, "runs_cc", "runs_cc_q", 1);
  const ids: string[] = [];
  for (let i = 0; i < 2; i++) {
    const [r] = await sql`select run_id from pgflow.start_flow('runs_cc', '{"channel":"C042"}')`;
    ids.push(r.run_id);
  }
  const first = await runs(url, "show", ids[0]);
  assert.equal(first.code, 0, shown(first));
  assert.match(first.stdout, /^\s+s\s+single\s+started\s+0\/1\s+\S+\s+-\s*$/m, "released: queued");
  const second = await runs(url, "show", ids[1]);
  assert.equal(second.code, 0, shown(second));
  assert.match(
    second.stdout,
    /^\s+s\s+single\s+waiting\s+0\/1\s+\S+\s+-\s+1 task\(s\) waiting since \S+Z: concurrency runs_cc\/s key C042: 1 of 1 in flight$/m,
  );
  const json = await runs(url, "show", ids[1], "--json");
  const { run } = JSON.parse(json.stdout);
  assert.equal(run.steps[0].status, "started");
  assert.equal(run.steps[0].waiting[0].reason, "concurrency runs_cc/s key C042: 1 of 1 in flight");
});
