/**
 * The worker checks a run's input against its flow's schema before any handler of the run runs:
 * once per run, failing the run at once (no retry) with the schema's issues, never quoting the
 * input; a run whose root steps are all skipped is checked by the first step that runs.
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker, type StandardSchemaV1 } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** `{ kind: string, token?: string }`, `kind` trimmed; counts its calls. */
function countingSchema(): {
  schema: StandardSchemaV1<unknown, { kind: string; token?: string }>;
  calls: () => number;
} {
  let calls = 0;
  const schema: StandardSchemaV1<unknown, { kind: string; token?: string }> = {
    "~standard": {
      version: 1,
      vendor: "test",
      validate(value) {
        calls++;
        const v = value as { kind?: unknown; token?: unknown } | null;
        const issues = [];
        if (typeof v?.kind !== "string") issues.push({ message: "Required", path: ["kind"] });
        if (v?.token !== undefined && !/^tok_/.test(String(v.token))) {
          // Like some libraries' default messages, this one quotes the value.
          issues.push({ message: `Invalid token "${v.token}"`, path: ["token"] });
        }
        return issues.length > 0
          ? { issues }
          : { value: { ...(v as { kind: string }), kind: (v!.kind as string).trim() } };
      },
    },
  };
  return { schema, calls: () => calls };
}

db.test("an input that fails the schema fails the run at once, before any handler, checked once", async ({ sql, url }) => {
  const { schema, calls } = countingSchema();
  const seen: unknown[] = [];
  const flow = new Flow({ slug: "schema_worker", input: schema, maxAttempts: 2, baseDelay: 1 })
    .step({ slug: "a" }, (input) => {
      seen.push(input);
      return input.kind;
    })
    .step({ slug: "b" }, (input) => input.kind.length)
    .step({ slug: "c", dependsOn: ["a", "b"] }, (deps) => `${deps.a}:${deps.b}`);
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, { connectionString: url });
    const bad = await startRun(sql, "schema_worker", { token: "sk_live_SECRET" });
    assert.equal((await waitForRun(sql, bad)).status, "failed");
    assert.deepEqual(seen, [], "no handler ran");
    assert.equal(calls(), 1, "two root tasks of one run: one check");
    const [run] = await sql<{ error_message: string }[]>`
      select error_message from pgflow.runs where run_id = ${bad}::uuid`;
    assert.equal(
      run.error_message,
      "input failed its schema: kind: Required; token: Invalid token [redacted]",
    );
    const tasks = await sql<{ step_slug: string; status: string; attempts_count: number }[]>`
      select step_slug, status, attempts_count from pgflow.step_tasks
      where run_id = ${bad}::uuid order by step_slug`;
    // One task failed the run on its first attempt (no retry); the other was cancelled with it.
    assert.deepEqual(tasks.map((t) => t.status).sort(), ["cancelled", "failed"]);
    assert.equal(tasks.find((t) => t.status === "failed")!.attempts_count, 1);
    const texts = JSON.stringify(
      await sql`select error_message from pgflow.step_tasks where run_id = ${bad}::uuid
                union all select error_message from pgflow.step_states where run_id = ${bad}::uuid`,
    ) + JSON.stringify(logs);
    assert.doesNotMatch(texts, /SECRET/, "the input's value is quoted nowhere");

    // A good input runs; handlers see the stored input (the worker cannot change it: kind is
    // not trimmed here, as it would be by a client that sends the schema's value).
    const good = await startRun(sql, "schema_worker", { kind: " urgent " });
    const done = await waitForRun(sql, good);
    assert.equal(done.status, "completed");
    assert.deepEqual(done.output, { c: " urgent :8" });
    assert.deepEqual(seen, [{ kind: " urgent " }]);
    assert.equal(calls(), 2);
  } finally {
    await stopAll(workers);
  }
});

db.test("a run whose root step is skipped is checked before the next step runs", async ({ sql, url }) => {
  const { schema } = countingSchema();
  let ran = 0;
  const flow = new Flow({ slug: "schema_skip", input: schema })
    .step({ slug: "gate", if: { kind: "urgent" } }, () => "paged")
    .step({ slug: "after", dependsOn: ["gate"] }, () => {
      ran++;
      return "ran";
    });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url });
    // No kind: the gate's condition is unmet, so it is skipped without a task.
    const run = await startRun(sql, "schema_skip", { other: 1 });
    const row = await waitForRun(sql, run);
    assert.equal(ran, 0, "the dependent handler never saw the input");
    assert.equal(row.status, "failed");
    const [failed] = await sql<{ step_slug: string; error_message: string }[]>`
      select step_slug, error_message from pgflow.step_tasks
      where run_id = ${run}::uuid and status = 'failed'`;
    assert.deepEqual({ ...failed }, {
      step_slug: "after",
      error_message: "input failed its schema: kind: Required",
    });
  } finally {
    await stopAll(workers);
  }
});
