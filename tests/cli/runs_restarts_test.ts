/**
 * `pgflow runs` and runs restarted before: a bulk (or single) retry or resume leaves a run that was
 * retried or resumed already as it is unless `--again`, and says by which run; `runs list` and
 * `runs show` name the runs made from a run ("retried as …") and the run a restart restarted.
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, readAndStart, registerWorker } from "../support/engine.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const runs = (url: string, ...args: string[]) => runCli(["runs", ...args, "--database-url", url]);

/** A run of `flow` (one step, one attempt) that failed. */
async function failedRun(sql: Sql, flow: string, worker: string): Promise<string> {
  const [{ run_id }] = await sql`select run_id::text from pgflow.start_flow(${flow}, '{}')`;
  // The queue also holds the restarts' tasks (no worker runs them): fail only this run's.
  const t = (await readAndStart(sql, flow, worker, [[flow, "a"]], 100))
    .find((c) => c.run_id === run_id)!;
  await sql`select pgflow.fail_task(${t.run_id}, 'a', 0, 'api down', ${t.attempt})`;
  return run_id;
}

/** The runs made from `runId`, oldest first, as [new run, mode]. */
async function restartsOf(sql: Sql, runId: string): Promise<[string, string][]> {
  const rows = await sql`select run_id::text, restart_mode from pgflow.runs
                         where restart_of_run_id = ${runId}::uuid order by started_at, run_id`;
  return rows.map((r) => [r.run_id, r.restart_mode]);
}

db.test(
  "a bulk retry given twice retries each run once; --again restarts them once more; list and show say as what",
  async ({ sql, url }) => {
    await defineFlow(sql, "rr_fail", [{ slug: "a" }], { maxAttempts: 1 });
    const worker = await registerWorker(sql, "rr_fail");
    const first = [
      await failedRun(sql, "rr_fail", worker),
      await failedRun(sql, "rr_fail", worker),
    ];

    const retried = await runs(url, "retry", "--flow", "rr_fail", "--since", "1h", "--yes");
    assert.equal(retried.code, 0, shown(retried));
    assert.match(retried.stdout, /^retried 2 of 2 run\(s\)$/m);
    const madeFrom = new Map<string, string>();
    for (const id of first) {
      const made = await restartsOf(sql, id);
      assert.equal(made.length, 1);
      madeFrom.set(id, made[0][0]);
    }

    // The same command again: nothing new to retry (the retries are started, not failed), and
    // each run already retried is named with its retry.
    const twice = await runs(url, "retry", "--flow", "rr_fail", "--since", "1h", "--yes");
    assert.equal(twice.code, 0, shown(twice));
    for (const id of first) {
      assert.match(
        twice.stdout,
        new RegExp(
          `^${id} \\(rr_fail\\) was retried already, as run ${
            madeFrom.get(id)
          }: left as it is \\(--again restarts it once more\\)$`,
          "m",
        ),
      );
      assert.equal((await restartsOf(sql, id)).length, 1, "not retried twice");
    }

    // A third failed run: the plan retries it and names the two it leaves.
    const third = await failedRun(sql, "rr_fail", worker);
    const plan = await runs(url, "retry", "--flow", "rr_fail", "--since", "1h");
    assert.equal(plan.code, 4, shown(plan));
    assert.match(plan.stdout, /^would retry 1 run\(s\) \(flow rr_fail, status failed, .*\):$/m);
    assert.match(plan.stdout, new RegExp(`^  ${third}  rr_fail  failed$`, "m"));
    assert.match(plan.stdout, /^and leave 2 run\(s\) retried or resumed already:$/m);
    const json = await runs(url, "resume", "--flow", "rr_fail", "--since", "1h", "--yes", "--json");
    assert.equal(json.code, 0, shown(json));
    const outcomes = JSON.parse(json.stdout).runs as Record<string, unknown>[];
    assert.deepEqual(
      outcomes.map((o) => [o.runId, o.outcome, o.restartedAs ?? null, o.restartMode ?? null])
        .sort(),
      [
        [first[0], "already_restarted", madeFrom.get(first[0]), "retry"],
        [first[1], "already_restarted", madeFrom.get(first[1]), "retry"],
        [third, "resumed", null, null],
      ].sort(),
    );
    const [resumedThird] = await restartsOf(sql, third);

    // --again restarts the runs restarted before as well.
    const again = await runs(
      url,
      "retry",
      "--flow",
      "rr_fail",
      "--since",
      "1h",
      "--again",
      "--yes",
    );
    assert.equal(again.code, 0, shown(again));
    assert.match(again.stdout, /^retried 3 of 3 run\(s\)$/m);
    for (const id of [...first, third]) assert.equal((await restartsOf(sql, id)).length, 2);

    // One run by id: the same rule.
    const single = await runs(url, "resume", third);
    assert.equal(single.code, 0, shown(single));
    assert.match(single.stdout, new RegExp(`^${third} \\(rr_fail\\) was retried already, as run `));
    const singleAgain = await runs(url, "resume", third, "--again");
    assert.equal(singleAgain.code, 0, shown(singleAgain));
    assert.match(singleAgain.stdout, new RegExp(`^resumed ${third} \\(rr_fail\\): new run `));
    assert.equal((await restartsOf(sql, third)).length, 3);

    // list: the newest run made from each source, and how many more.
    const list = await runs(url, "list", "--flow", "rr_fail", "--status", "failed");
    assert.equal(list.code, 0, shown(list));
    const newest = (await restartsOf(sql, third)).at(-1)![0];
    assert.match(
      list.stdout,
      new RegExp(`^${third}\\s.*\\sresumed as ${newest} \\(\\+2 more\\)`, "m"),
    );
    const listJson = JSON.parse((await runs(url, "list", "--id-prefix", third, "--json")).stdout);
    assert.deepEqual(
      listJson.runs[0].restarts.map((r: { mode: string }) => r.mode),
      ["resume", "retry", "resume"],
    );
    assert.deepEqual(
      Object.keys(listJson.runs[0].restarts[0]).sort(),
      ["mode", "runId", "startedAt", "status"],
    );

    // show: every run made from the source; a restart names its source.
    const show = await runs(url, "show", third);
    assert.equal(show.code, 0, shown(show));
    assert.match(
      show.stdout,
      new RegExp(`^restarted resumed as ${resumedThird[0]} \\(started, \\S+\\)$`, "m"),
    );
    assert.equal((show.stdout.match(/^restarted /gm) ?? []).length, 3);
    const restart = await runs(url, "show", resumedThird[0]);
    assert.match(restart.stdout, new RegExp(`^restart\\s+resume of ${third}$`, "m"));
  },
  { fresh: true },
);
