/**
 * `pgflow runs start|watch`, run ids by their start, `runs list --flow <alias>` and
 * `runs retry --input`, as a user runs them (processes) against a real database and worker: a
 * start through an alias checked by the flows module's schema (nothing started for a bad input,
 * never its values in the error), a watch that prints the events until the end with the exit code
 * of how it ended, a retry with a corrected input linked to its source, and prefixes that are
 * unique, ambiguous or unknown.
 */
import assert from "node:assert/strict";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { orderV1 } from "./fixtures/orders.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);
const FLOWS = new URL("./fixtures/orders.ts", import.meta.url).pathname;

/** Runs `pgflow runs <args>` on `url`. */
const runs = (url: string, ...args: string[]) => runCli(["runs", ...args, "--database-url", url]);

db.test(
  "runs start through an alias, checked by --flows; watch until it ends; list --flow <alias>",
  async ({ sql, url }) => {
    const workers: FlowWorker[] = [];
    try {
      await startWorker(workers, orderV1, { connectionString: url });

      const bad = await runs(
        url,
        "start",
        "co_order",
        "--input",
        '{"id": "SECRET-7"}',
        "--flows",
        FLOWS,
      );
      assert.equal(bad.code, 1, shown(bad));
      assert.match(
        bad.stderr,
        /cannot start flow co_order: input failed its schema: id: expected a number/,
      );
      assert.doesNotMatch(bad.stderr + bad.stdout, /SECRET/, "no value of the input is shown");
      const [{ n }] = await sql`select count(*)::int as n from pgflow.runs`;
      assert.equal(n, 0, "a bad input starts nothing");

      const started = await runs(
        url,
        "start",
        "co_order",
        "--input",
        '{"id": 3}',
        "--flows",
        FLOWS,
        "--json",
      );
      assert.equal(started.code, 0, shown(started));
      const { runId, flowSlug, startedAs } = JSON.parse(started.stdout);
      assert.deepEqual([flowSlug, startedAs], ["co_order_v1", "co_order"]);

      // By the 8 characters the dashboard shows; the events in order, up to the run's end.
      const watched = await runs(url, "watch", runId.slice(0, 8));
      assert.equal(watched.code, 0, shown(watched));
      const types = watched.stdout.trim().split("\n").map((l) => l.split(/\s+/)[1]);
      assert.deepEqual(types, [
        "run:started",
        "step:started",
        "step:completed",
        "step:started",
        "step:completed",
        "run:completed",
      ]);
      assert.match(watched.stdout, /step:completed\s+ship$/m);
      const json = await runs(url, "watch", runId, "--json");
      const events = json.stdout.trim().split("\n").map((l) => JSON.parse(l));
      assert.ok(events.every((e) => !("output" in e) && !("input" in e)), "no input, no output");

      const failing = await runs(url, "start", "co_order", "--input", '{"id": -1}', "--watch");
      assert.equal(failing.code, 1, shown(failing));
      assert.match(failing.stdout, /^started run \S+ of co_order_v1 \(through alias co_order\)$/m);
      assert.match(failing.stdout, /run:failed\s+at check: negative id$/m);

      const list = await runs(url, "list", "--flow", "co_order");
      assert.equal(list.code, 0, shown(list));
      assert.equal(list.stdout.trim().split("\n").length, 3, "the header and both runs");
    } finally {
      await stopAll(workers);
    }
  },
  { fresh: true },
);

db.test(
  "runs retry --input: a new run with the corrected input, linked to its source, checked by --flows",
  async ({ sql, url }) => {
    const workers: FlowWorker[] = [];
    try {
      await startWorker(workers, orderV1, { connectionString: url });
      const failed = await runs(url, "start", "co_order_v1", "--input", '{"id": -5}', "--watch");
      assert.equal(failed.code, 1, shown(failed));
      const [source] = await sql<{ run_id: string }[]>`select run_id from pgflow.runs`;

      const bad = await runs(
        url,
        "retry",
        source.run_id.slice(0, 8),
        "--input",
        '{"id": "x"}',
        "--flows",
        FLOWS,
      );
      assert.equal(bad.code, 1, shown(bad));
      assert.match(bad.stdout, /refused .*input failed its schema: id: expected a number/);

      const retried = await runs(
        url,
        "retry",
        source.run_id.slice(0, 8),
        "--input",
        '{"id": 5}',
        "--flows",
        FLOWS,
      );
      assert.equal(retried.code, 0, shown(retried));
      const newId = /new run (\S+)$/m.exec(retried.stdout)![1];
      const [row] = await sql<
        { input: unknown; restart_of_run_id: string; restart_mode: string }[]
      >`
      select input, restart_of_run_id, restart_mode from pgflow.runs where run_id = ${newId}`;
      assert.deepEqual({ ...row }, {
        input: { id: 5 },
        restart_of_run_id: source.run_id,
        restart_mode: "retry",
      });
      const [kept] = await sql`select input from pgflow.runs where run_id = ${source.run_id}`;
      assert.deepEqual(kept.input, { id: -5 }, "the source is unchanged");

      const bulk = await runs(url, "retry", "--flow", "co_order_v1", "--input", "{}");
      assert.equal(bulk.code, 2, shown(bulk));
      assert.match(bulk.stderr, /--input takes one run \(its id\), not filters/);
    } finally {
      await stopAll(workers);
    }
  },
  { fresh: true },
);

db.test(
  "a run id's start names the run when one run's id starts so; else ambiguous (2) or none (3)",
  async ({ sql, url }) => {
    await sql`select pgflow.create_flow('co_idle')`;
    await sql`select pgflow.add_step('co_idle', 'wait')`;
    const ids = ["aaaaaaaa-1111-4000-8000-000000000001", "aaaaaaaa-2222-4000-8000-000000000002"];
    for (const id of ids) {
      const start = await runs(url, "start", "co_idle", "--input", "{}", "--run-id", id);
      assert.equal(start.code, 0, shown(start));
    }
    const again = await runs(
      url,
      "start",
      "co_idle",
      "--input",
      "{}",
      "--run-id",
      ids[0],
      "--json",
    );
    assert.equal(JSON.parse(again.stdout).runId, ids[0], "the same id is the same run");

    const ambiguous = await runs(url, "show", "aaaaaaaa");
    assert.equal(ambiguous.code, 2, shown(ambiguous));
    assert.match(ambiguous.stderr, /2 runs start with aaaaaaaa: .*; give more of the id$/m);
    for (const id of ids) assert.ok(ambiguous.stderr.includes(`${id} (co_idle, started)`));
    const none = await runs(url, "cancel", "bbbbbbbb");
    assert.equal(none.code, 3, shown(none));
    assert.match(none.stderr, /no run's id starts with bbbbbbbb/);

    const one = await runs(url, "cancel", "AAAAAAAA-2");
    assert.equal(one.code, 0, shown(one));
    assert.match(one.stdout, /^cancelled aaaaaaaa-2222-4000-8000-000000000002 \(co_idle\)$/m);
    const watched = await runs(url, "watch", "aaaaaaaa-2222");
    assert.equal(watched.code, 1, "a cancelled run's watch ends with 1");
    assert.match(watched.stdout, /run:cancelled/);
  },
  { fresh: true },
);

db.test(
  "runs start --many: one run per element in one call, the failing element named, nothing started on a refusal",
  async ({ sql, url }) => {
    const workers: FlowWorker[] = [];
    try {
      // The worker compiles the flow; the runs are counted, not run to the end.
      await startWorker(workers, orderV1, { connectionString: url });
      const before = await sql`select count(*)::int as n from pgflow.runs`;

      const bad = await runs(
        url,
        "start",
        "co_order",
        "--many",
        "--input",
        '[{"id": 1}, {"id": "SECRET-2"}]',
        "--flows",
        FLOWS,
      );
      assert.equal(bad.code, 1, shown(bad));
      assert.match(bad.stderr, /cannot start flow co_order: inputs\[1\] failed its schema: id: /);
      assert.doesNotMatch(bad.stderr + bad.stdout, /SECRET/, "no value of the input is shown");

      const notArray = await runs(url, "start", "co_order", "--many", "--input", '{"id": 1}');
      assert.equal(notArray.code, 2, shown(notArray));
      assert.match(notArray.stderr, /--many needs an array as the input, one element per run/);
      const withId = await runs(
        url,
        "start",
        "co_order",
        "--many",
        "--input",
        "[]",
        "--run-id",
        crypto.randomUUID(),
      );
      assert.equal(withId.code, 2, shown(withId));
      const after = await sql`select count(*)::int as n from pgflow.runs`;
      assert.equal(after[0].n, before[0].n, "a refused --many starts nothing");

      const started = await runs(
        url,
        "start",
        "co_order",
        "--many",
        "--input",
        '[{"id": 11}, {"id": 12}, {"id": 13}]',
        "--flows",
        FLOWS,
        "--json",
      );
      assert.equal(started.code, 0, shown(started));
      const { runIds, flowSlug, startedAs } = JSON.parse(started.stdout);
      assert.deepEqual([flowSlug, startedAs], ["co_order_v1", "co_order"]);
      const stored = await sql<{ run_id: string; id: number }[]>`
        select run_id, (input ->> 'id')::int as id from pgflow.runs where run_id = any(${runIds}::uuid[])`;
      const idOf = new Map(stored.map((r) => [r.run_id, r.id]));
      assert.deepEqual(runIds.map((r: string) => idOf.get(r)), [11, 12, 13]);

      const plain = await runs(url, "start", "co_order", "--many", "--input", '[{"id": 14}]');
      assert.equal(plain.code, 0, shown(plain));
      assert.match(plain.stdout, /started 1 run of co_order_v1 \(through alias co_order\)/);
    } finally {
      await stopAll(workers);
    }
  },
);
