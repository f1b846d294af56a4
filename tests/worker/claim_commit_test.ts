/**
 * How the worker's hot-path calls commit: both a read that only claims and a read that carries
 * completions wait for the disk. A claim committed without waiting (a "lease") would be faster to
 * answer (bench/results.md measures it), but a server crash could forget it and its attempt would
 * run again under the same number: the claim's guarantee stays. Each call is made inside a
 * transaction whose setting is `on`, so the setting the call leaves for its commit can be read
 * back before that transaction ends.
 */
import assert from "node:assert/strict";
import type { Sql } from "../../src/platform/types.ts";
import { completeAndClaim, readAndClaim, type ReadOptions } from "../../src/task/read.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

const READ: ReadOptions = {
  visibilityTimeout: 30,
  qty: 10,
  maxPollSeconds: 0,
  pollIntervalMs: 50,
  timeoutMs: 30_000,
};

/** `call` in a transaction that commits synchronously unless the call says otherwise. */
async function commitSetting<T>(
  sql: Sql,
  call: (tx: Sql) => Promise<T>,
): Promise<{ result: T; setting: string }> {
  return await sql.begin(async (tx) => {
    await tx`set local synchronous_commit = on`;
    const result = await call(tx as unknown as Sql);
    const [{ setting }] = await tx<{ setting: string }[]>`
      select current_setting('synchronous_commit') as setting`;
    return { result, setting };
  }) as { result: T; setting: string };
}

db.test("a claim and a completion carried with the next read both wait for the disk", async ({ sql }) => {
  await defineFlow(sql, "lease_commit", [{ slug: "a" }, { slug: "b", deps: ["a"] }]);
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'lease_commit', 'test_fn',
                                          '[["lease_commit", "a"], ["lease_commit", "b"]]'::jsonb)`;
  const [{ run_id }] = await sql`select run_id from pgflow.start_flow('lease_commit', '{}')`;

  const claim = await commitSetting(
    sql as unknown as Sql,
    (tx) => readAndClaim(tx, "lease_commit", worker, null, READ),
  );
  assert.deepEqual(claim.result.claimed.map((t) => t.stepSlug), ["a"]);
  assert.equal(claim.setting, "on", "the claim's transaction waits for WAL");
  const [a] = await sql`select status, attempts_count from pgflow.step_tasks
                        where run_id = ${run_id} and step_slug = 'a'`;
  assert.deepEqual({ ...a }, { status: "started", attempts_count: 1 });

  const task = claim.result.claimed[0];
  const carried = await commitSetting(
    sql as unknown as Sql,
    (tx) =>
      completeAndClaim(tx, "lease_commit", worker, null, READ, {
        runIds: [task.runId],
        stepSlugs: [task.stepSlug],
        taskIndexes: [task.taskIndex],
        outputs: ['{"done": true}'],
        attempts: [task.attempt],
      }),
  );
  assert.deepEqual(carried.result.claimed.map((t) => t.stepSlug), ["b"]);
  assert.equal(carried.setting, "on", "a completion's transaction keeps synchronous_commit");
  const steps = await sql`select step_slug, status from pgflow.step_tasks
                          where run_id = ${run_id} order by step_slug`;
  assert.deepEqual(steps.map((s) => `${s.step_slug}:${s.status}`), ["a:completed", "b:started"]);
});
