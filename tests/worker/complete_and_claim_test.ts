/**
 * A worker whose reads come back full reports each batch on its own connection while its next
 * read claims the next batch (two backends at work, not one call doing both in turn); otherwise a
 * read carries the completions waiting (pgflow.complete_and_claim: a completion that releases
 * work on the queue is claimed in the same call). Completions never wait for a read (the
 * completer sends what no read carries), and a read that carried a completion Postgres refuses
 * gives the completions back to the completer, which reports them on their own while reads go on.
 */
import assert from "node:assert/strict";
import { type ExactNumber, exactNumber, Flow, type FlowWorker } from "../../mod.ts";
import type { ClaimedTask } from "../../src/task/claim.ts";
import { Completer } from "../../src/task/completer.ts";
import type { CompletionArrays } from "../../src/task/report.ts";
import { createLogger } from "../../src/platform/logger.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { defineFlow, readAndStart } from "../support/engine.ts";
import { startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

db.test("a busy worker reports each full batch on its own, beside the read of the next", async ({ sql, connect }) => {
  const flow = new Flow<{ n: number }>({ slug: "cc_busy" }).step({ slug: "work" }, (i) => i.n);
  const sent: string[] = [];
  const pool = connect({
    max: 4,
    debug: (_connection: number, query: string) => sent.push(query.replace(/\s+/g, " ").trim()),
  });
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { sql: pool, maxConcurrent: 10, batchSize: 10 });
    const runs = 60;
    await sql`select count(pgflow.start_flow('cc_busy', jsonb_build_object('n', i)))
              from generate_series(1, ${runs}::int) i`;
    let done: { status: string; output: { work: number }; input: { n: number } }[] = [];
    await waitFor(async () => {
      done = await sql`select status, output, input from pgflow.runs
                       where flow_slug = 'cc_busy' and status <> 'started'`;
      return done.length === runs;
    }, { what: `${runs} runs to end` });
    for (const r of done) {
      assert.deepEqual([r.status, r.output], ["completed", { work: r.input.n }]);
    }
    const combined = sent.filter((q) => /pgflow\.complete_and_claim\(/.test(q)).length;
    const alone = sent.filter((q) => /pgflow\.complete_tasks?\(/.test(q)).length;
    const reads = sent.filter((q) => /pgflow\.read_and_claim\(/.test(q)).length;
    // Six full batches of ten, each read after a full one: no read carries completions, and each
    // batch's ten go in one call of their own (batched, not one per task).
    assert.equal(combined, 0, `${combined} reads carried completions`);
    assert.ok(alone >= 6 && alone <= 12, `${alone} reports went alone for 6 batches`);
    assert.ok(reads >= 7, `${reads} reads`);
  } finally {
    await stopAll(workers);
  }
});

db.test("carried completions: settled by the read that carried them, or given back and sent alone", async ({ sql, connect }) => {
  await defineFlow(sql, "cc_take", [{ slug: "a" }]);
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'cc_take', 'test_fn')`;
  await sql`select count(pgflow.start_flow('cc_take', '{}')) from generate_series(1, 3)`;
  const tasks: ClaimedTask[] = (await readAndStart(sql, "cc_take", worker, [["cc_take", "a"]]))
    .map((r) => ({
      messageId: String(r.message_id),
      flowSlug: r.flow_slug!,
      runId: r.run_id!,
      stepSlug: r.step_slug!,
      taskIndex: r.task_index!,
      input: r.input as ClaimedTask["input"],
      attempt: r.attempt!,
    }));
  const sent: string[] = [];
  const pool = connect({
    max: 2,
    debug: (_connection: number, query: string) => sent.push(query.replace(/\s+/g, " ").trim()),
  });
  const log = createLogger({ level: "error", sink: () => {} });
  const completer = new Completer({ sql: pool, maxInFlight: 1 });
  const complete = (t: ClaimedTask, output: string) =>
    completer.report(t, { kind: "complete", output }, log);
  // A read that carries a completion: the completion is the read's to send, and is settled when
  // the read succeeds (this read sends nothing itself, so the task stays started).
  // Carried at once: queued completions are sent by the completer itself after this tick.
  const first = complete(tasks[0], "1");
  let carried: CompletionArrays | undefined;
  assert.equal(
    await completer.carry((c) => Promise.resolve(carried = c).then(() => "read 1")),
    "read 1",
  );
  assert.deepEqual(carried?.runIds, [tasks[0].runId]);
  assert.deepEqual(await first, { outcome: "completed" });
  assert.equal(
    await completer.carry((c) => Promise.resolve(c)),
    undefined,
    "nothing left to carry",
  );

  // A read carrying two fails: they go back to the completer, which sends them itself in one
  // call, and the read is made again without them.
  const rest = [complete(tasks[1], "2"), complete(tasks[2], "3")];
  const reads: (CompletionArrays | undefined)[] = [];
  const answer = await completer.carry((c) => {
    reads.push(c);
    return c === undefined ? Promise.resolve("read alone") : Promise.reject(new Error("lost"));
  });
  assert.equal(answer, "read alone");
  assert.deepEqual(reads.map((r) => r?.runIds.length), [2, undefined]);
  assert.deepEqual(await Promise.all(rest), [{ outcome: "completed" }, { outcome: "completed" }]);
  assert.equal(sent.filter((q) => /pgflow\.complete_tasks\(/.test(q)).length, 1);
  const statuses = await sql`select status from pgflow.step_tasks
    where run_id = any (${[tasks[1].runId, tasks[2].runId]}::uuid[])`;
  assert.deepEqual(statuses.map((s) => s.status), ["completed", "completed"]);
  // tasks[0] was only carried by a read that sent nothing: the completer never sent it.
  assert.equal(
    (await sql`select status from pgflow.step_tasks where run_id = ${tasks[0].runId}::uuid`)[0]
      .status,
    "started",
  );
});

db.test("a read carrying an output Postgres refuses: completions reported alone, reads go on", async ({ sql, url }) => {
  // A one-task read is not full, so the worker waits for a notification; step a's completion
  // releases step b on the same queue, so it wakes the loop to read at once, carrying it.
  // Run 3's output is a number beyond numeric's range: only Postgres can refuse it.
  const flow = new Flow<{ n: number }>({ slug: "cc_bad", maxAttempts: 1 })
    .step({ slug: "a" }, (input): { n: number | ExactNumber } => ({
      n: input.n === 3 ? exactNumber("1e1000000") : input.n,
    }))
    .step({ slug: "b", dependsOn: ["a"] }, (input) => input.a);
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, {
      connectionString: url,
      maxConcurrent: 4,
      batchSize: 4,
    });
    const start = async (n: number) =>
      (await sql<{ run_id: string }[]>`
        select (pgflow.start_flow('cc_bad', jsonb_build_object('n', ${n}::int))).run_id`)[0]
        .run_id;
    const bad = await waitForRun(sql, await start(3));
    assert.equal(bad.status, "failed");
    assert.ok(
      logs.some((l) => l.event === "completions with the read failed; reporting them on their own"),
      "the combined call failed and was recovered from",
    );
    const good = await Promise.all(
      [0, 1, 2, 4, 5].map(async (n) => waitForRun(sql, await start(n))),
    );
    assert.deepEqual(good.map((r) => r.status), good.map(() => "completed"));
    assert.deepEqual(good[3].output, { b: { n: 4 } });
    assert.deepEqual(logs.filter((l) => l.event === "poll failed; backing off"), []);
  } finally {
    await stopAll(workers);
  }
});
