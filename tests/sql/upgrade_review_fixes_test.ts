/**
 * The review-fixes migration (…_pgflow_review_fixes.sql) as an upgrade of a database on the first
 * release: work in flight keeps going, the queues pgflow created for existing flows are recorded
 * (and an adopted application queue is not), options past the new bounds are lowered, and worker
 * rows with names the keep-alive could not use are removed.
 */
import assert from "node:assert/strict";
import { applyMigrations, listMigrations, MIGRATIONS_DIR } from "../../local/migrate.ts";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages, readAndStart, registerWorker } from "../support/engine.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

async function migrationsUpTo(name: string, including: boolean): Promise<string> {
  const files = await listMigrations(MIGRATIONS_DIR);
  const index = files.findIndex((f) => f.name === name);
  assert.ok(index > 0, `${name} is a later migration`);
  const dir = await Deno.makeTempDir({ prefix: "pgflow-review-upgrade-" });
  for (const file of files.slice(0, including ? index + 1 : index)) {
    await Deno.copyFile(file.path, `${dir}/${file.version}_${file.name}.sql`);
  }
  return dir;
}

db.test(
  "the review-fixes upgrade keeps work in flight and records only what pgflow created",
  async ({ sql }) => {
    const before = await migrationsUpTo("pgflow_review_fixes", false);
    const after = await migrationsUpTo("pgflow_review_fixes", true);
    await applyMigrations(sql, before);

    // The first release let a plain flow adopt an application's queue.
    await sql`select pgmq.create('legacy_app')`;
    const [{ send: appMsg }] = await sql`select * from pgmq.send('legacy_app', '{"app": true}')`;
    await defineFlow(sql, "legacy_app", [{ slug: "a" }]);
    await defineFlow(sql, "legacy_own", [{ slug: "a" }]);
    await defineFlow(sql, "legacy_steps", [{ slug: "a" }, { slug: "b", deps: ["a"] }], {
      mode: "step",
    });
    // Options the new bounds refuse.
    await defineFlow(sql, "legacy_huge", [{ slug: "a", queue: "legacy_q", timeout: 2147483640 }], {
      mode: "routed",
      timeout: 2147483647,
      maxAttempts: 2147483647,
    });
    // A worker function name the keep-alive would have put into its URL as is.
    await sql`select pgflow.register_worker(gen_random_uuid(), 'legacy_q', '../admin')`;
    await sql`select pgflow.register_worker(gen_random_uuid(), 'legacy_q', 'legacy_fn')`;

    const [run] = await sql`select * from pgflow.start_flow('legacy_own', '{}')`;
    await sql`select pgflow.start_flow('legacy_app', '{}')`;
    const worker = await registerWorker(sql, "legacy_own");
    const [claimed] = await readAndStart(sql, "legacy_own", worker, [["legacy_own", "a"]]);
    assert.equal(claimed.disposition, "claimed");
    const tasksBefore = await sql`select * from pgflow.step_tasks order by run_id, step_slug`;

    await applyMigrations(sql, after);

    assert.deepEqual(
      await sql`select * from pgflow.step_tasks order by run_id, step_slug`,
      tasksBefore,
    );
    assert.deepEqual(
      (await sql`select queue_name, flow_slug from pgflow.created_queues order by 1`).map((r) =>
        `${r.queue_name}:${r.flow_slug}`
      ),
      ["legacy_own:legacy_own", "legacy_steps__a:legacy_steps", "legacy_steps__b:legacy_steps"],
      "the adopted application queue is not recorded as pgflow's",
    );
    const [flow] =
      await sql`select opt_timeout, opt_max_attempts from pgflow.flows where flow_slug = 'legacy_huge'`;
    const [step] = await sql`select opt_timeout from pgflow.steps where flow_slug = 'legacy_huge'`;
    assert.deepEqual([flow.opt_timeout, flow.opt_max_attempts, step.opt_timeout], [
      31536000,
      1000,
      31536000,
    ]);
    assert.deepEqual(
      (await sql`select function_name from pgflow.worker_functions order by 1`).map((r) =>
        r.function_name
      ),
      ["legacy_fn", "test_fn"],
    );

    // Work in flight completes across the upgrade.
    await sql`select pgflow.complete_task(${run.run_id}, 'a', 0, '1', ${claimed.attempt})`;
    assert.equal(
      (await sql`select status from pgflow.runs where run_id = ${run.run_id}`)[0].status,
      "completed",
    );

    // Deleting the flow that adopted the application's queue leaves the queue and its messages.
    await sql`select pgflow.delete_flow_and_data('legacy_app')`;
    assert.deepEqual((await queueMessages(sql, "legacy_app")).map((m) => m.msg_id), [appMsg]);
    await sql`select pgflow.delete_flow_and_data('legacy_own')`;
    await sql`select pgflow.delete_flow_and_data('legacy_steps')`;
    const queues = (await sql`select queue_name from pgmq.list_queues() order by 1`).map((r) =>
      r.queue_name
    );
    assert.deepEqual(queues, ["legacy_app", "legacy_q"]);

    await Deno.remove(before, { recursive: true });
    await Deno.remove(after, { recursive: true });
  },
  { fresh: true },
);
