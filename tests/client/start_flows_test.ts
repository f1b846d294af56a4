/**
 * `client.startFlows`: many runs in one call. The handles come back in input order; a bulk start of
 * 10,000 runs completes through one worker, each run exactly once; an input that fails its schema
 * (or cannot be written as JSON) is named by its index and nothing is started.
 */
import assert from "node:assert/strict";
import { z } from "npm:zod@3.24.2";
import {
  createClient,
  Flow,
  type FlowWorker,
  InputValidationError,
  StartFlowError,
} from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

/** Each handler call, by input n: the test counts them for exactly-once. */
const calls = new Map<number, number>();
const double = new Flow<{ n: number }>({ slug: "cl_bulk" })
  .step({ slug: "twice" }, (input) => {
    calls.set(input.n, (calls.get(input.n) ?? 0) + 1);
    return input.n * 2;
  });

const checked = new Flow({ slug: "cl_bulk_checked", input: z.object({ n: z.number().int() }) })
  .step({ slug: "echo" }, (input) => input.n);

db.test("10,000 runs from one startFlows call complete through a worker, each once, handles in input order", async ({ url, sql }) => {
  const client = createClient({ connectionString: url });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, double, { connectionString: url, maxConcurrent: 10, batchSize: 10 });
    const count = 10_000;
    const inputs = Array.from({ length: count }, (_, n) => ({ n }));
    const runs = await client.startFlows(double, inputs);
    assert.equal(runs.length, count);
    assert.ok(runs.every((r) => r.flowSlug === "cl_bulk"));
    await waitFor(async () => {
      const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                                where flow_slug = 'cl_bulk' and status = 'completed'`;
      return n === count;
    }, { timeoutMs: 300_000, intervalMs: 250, what: "every bulk-started run to complete" });
    // Each handle is its input's run: the run of inputs[i] doubled i.
    for (const i of [0, 1, 4_999, 9_999]) {
      assert.equal(
        await runs[i].waitFor("completed", { timeoutMs: 10_000 }).then((o) => o.twice),
        i * 2,
      );
    }
    const outputs = await sql<{ run_id: string; twice: number }[]>`
      select run_id, (output ->> 'twice')::int as twice from pgflow.runs where flow_slug = 'cl_bulk'`;
    const byRun = new Map(outputs.map((o) => [o.run_id, o.twice]));
    assert.deepEqual(runs.map((r) => byRun.get(r.runId)), inputs.map((x) => x.n * 2));
    assert.equal(calls.size, count);
    assert.ok([...calls.values()].every((c) => c === 1), "every run's task ran exactly once");
  } finally {
    await stopAll(workers);
    await client.close();
  }
});

db.test("startFlows names the bad input by its index and starts nothing; by name through the flows it was given", async ({ url, sql }) => {
  const client = createClient({ connectionString: url, flows: [checked] });
  try {
    await assert.rejects(
      client.startFlows(checked, [{ n: 1 }, { n: 2 }, { n: 2.5 }, { n: "x" as never }]),
      (e: unknown) => {
        assert.ok(e instanceof InputValidationError && e instanceof StartFlowError);
        assert.equal(e.index, 2);
        assert.deepEqual(e.issues.map((i) => i.path), [["n"]]);
        assert.match(
          e.message,
          /^cannot start flow cl_bulk_checked: inputs\[2\] failed its schema: n: /,
        );
        return true;
      },
    );
    await assert.rejects(
      client.startFlows("cl_bulk_checked", [{ n: 1 }, { n: "x" }]),
      /inputs\[1\] failed its schema/,
    );
    await assert.rejects(
      client.startFlows("cl_bulk_unknown", [{}, { big: 10n } as never]),
      /cannot start flow cl_bulk_unknown: inputs\[1\]\.big/,
    );
    await assert.rejects(
      client.startFlows("cl_bulk_unknown", [{}, undefined as never]),
      /inputs\[1\] is undefined; pass a JSON value/,
    );
    await assert.rejects(
      client.startFlows("cl_bulk_unknown", { n: 1 } as never),
      /inputs must be an array \(one input per run\), got object/,
    );
    await assert.rejects(
      client.startFlows("cl_bulk_unknown", [{}], { priority: 1.5 }),
      /priority 1.5 must be an integer between -1000 and 1000/,
    );
    // The database's refusal, as startFlow's: an unknown flow.
    await assert.rejects(
      client.startFlows("cl_bulk_unknown", [{}]),
      (e: unknown) =>
        e instanceof StartFlowError && e.code === "22023" && /does not exist/.test(e.message),
    );
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                              where flow_slug in ('cl_bulk_checked', 'cl_bulk_unknown')`;
    assert.equal(n, 0);
    assert.deepEqual(await client.startFlows(checked, []), []);
  } finally {
    await client.close();
  }
});
