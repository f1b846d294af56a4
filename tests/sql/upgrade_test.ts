/**
 * The shared-queue migration as a maintenance upgrade: applied on top of the base release with
 * queued and started work in flight, nothing is lost; a failure (a lock wait past lock_timeout)
 * rolls it back completely.
 */
import assert from "node:assert/strict";
import {
  applyMigrations,
  listMigrations,
  MigrationError,
  MIGRATIONS_DIR,
} from "../../local/migrate.ts";
import { Flow } from "../../src/dsl/flow.ts";
import { routeFlow } from "../../src/routing/route_flow.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import {
  compileFlow,
  defineFlow,
  queueMessages,
  readAndStart,
  registerWorker,
} from "../support/engine.ts";

const db = testDatabase(import.meta.url, { template: "pgmq" });

/** A folder holding copies of the first `count` released migrations. */
async function releasedUpTo(count: number): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-upgrade-" });
  for (const file of (await listMigrations(MIGRATIONS_DIR)).slice(0, count)) {
    await Deno.copyFile(file.path, `${dir}/${file.version}_${file.name}.sql`);
  }
  return dir;
}

db.test(
  "the shared-queue upgrade keeps queued and started work and declares routed queues",
  async ({ sql }) => {
    const files = await listMigrations(MIGRATIONS_DIR);
    const upgradeIndex = files.findIndex((f) => f.name === "pgflow_shared_queues");
    assert.ok(upgradeIndex > 0, "the shared-queue migration comes after the base release");
    const base = await releasedUpTo(upgradeIndex);
    await applyMigrations(sql, base);

    // Work in flight on the base release: a routed flow with grouped steps, queued and started tasks.
    await defineFlow(sql, "triage_v1", [
      { slug: "classify", queue: "thread_processing" },
      { slug: "enrich", deps: ["classify"], queue: "thread_processing" },
      { slug: "deliver", deps: ["enrich"], queue: "slack_delivery" },
    ], { mode: "routed" });
    const runs = [];
    for (let i = 0; i < 4; i++) {
      runs.push(
        (await sql`select run_id from pgflow.start_flow('triage_v1', ${sql.json({ i })})`)[0]
          .run_id,
      );
    }
    const worker = await registerWorker(sql, "thread_processing");
    const started =
      (await readAndStart(sql, "thread_processing", worker, [["triage_v1", "classify"]], 2))
        .filter((r) => r.disposition === "claimed");
    assert.equal(started.length, 2);
    const tasksBefore = await sql`select * from pgflow.step_tasks order by run_id, step_slug`;
    const messagesBefore = await queueMessages(sql, "thread_processing");

    const full = await releasedUpTo(files.length);
    assert.deepEqual(
      await applyMigrations(sql, full),
      files.slice(upgradeIndex).map((f) => f.version),
    );

    assert.deepEqual(
      await sql`select * from pgflow.step_tasks order by run_id, step_slug`,
      tasksBefore,
    );
    assert.deepEqual(
      (await queueMessages(sql, "thread_processing")).map(({ vt_in_seconds: _, ...m }) => m),
      messagesBefore.map(({ vt_in_seconds: _, ...m }) => m),
    );
    const declared = (await sql`select queue_name from pgflow.shared_queues order by 1`).map((r) =>
      r.queue_name
    );
    assert.deepEqual(declared, ["slack_delivery", "thread_processing"]);

    // The same definition compiled by a new worker verifies; the in-flight work finishes.
    const flow = routeFlow(
      new Flow<{ i: number }>({ slug: "triage_v1" })
        .step({ slug: "classify" }, (x) => x.i)
        .step({ slug: "enrich", dependsOn: ["classify"] }, (d) => d.classify)
        .step({ slug: "deliver", dependsOn: ["enrich"] }, (d) => d.enrich),
      {
        queues: {
          classify: "thread_processing",
          enrich: "thread_processing",
          deliver: "slack_delivery",
        },
      },
    );
    assert.equal((await compileFlow(sql, flow)).status, "verified");
    for (
      const t of started
    ) await sql`select pgflow.complete_task(${t.run_id}, 'classify', 0, '1', ${t.attempt})`;
    const [{ n }] =
      await sql`select count(*)::int as n from pgflow.step_tasks where step_slug = 'enrich'`;
    assert.equal(n, 2, "completions after the upgrade release dependents");
    await Deno.remove(base, { recursive: true });
    await Deno.remove(full, { recursive: true });
  },
  { fresh: true },
);

db.test("a failure inside the upgrade rolls it back completely", async ({ sql, connect }) => {
  const files = await listMigrations(MIGRATIONS_DIR);
  const upgradeIndex = files.findIndex((f) => f.name === "pgflow_shared_queues");
  await applyMigrations(sql, await releasedUpTo(upgradeIndex));
  await defineFlow(sql, "kept", [{ slug: "a", queue: "kept_q" }], { mode: "routed" });
  await sql`select pgflow.start_flow('kept', '{}')`;
  const functionsBefore = await sql`select proname, md5(prosrc) as src from pg_proc
                                    where pronamespace = 'pgflow'::regnamespace order by 1, 2`;

  // A worker holds the steps table: the upgrade's bounded lock wait gives up.
  const holder = connect();
  let release!: () => void;
  const held = holder.begin(async (tx) => {
    await tx`lock table pgflow.steps in access exclusive mode`;
    await new Promise<void>((resolve) => release = resolve);
  });
  await waitFor(async () =>
    (await sql`select count(*)::int as n from pg_locks
               where relation = 'pgflow.steps'::regclass and mode = 'AccessExclusiveLock' and granted`)[
      0
    ].n === 1, {
    what: "the holder's lock",
  });
  const full = await releasedUpTo(files.length);
  try {
    await assert.rejects(() => applyMigrations(sql, full), (err: unknown) => {
      assert.ok(err instanceof MigrationError);
      assert.match(
        err.message,
        /pgflow_shared_queues\.sql failed: canceling statement due to lock timeout/,
      );
      return true;
    });
  } finally {
    release();
    await held;
  }
  assert.equal((await sql`select to_regclass('pgflow.shared_queues') as t`)[0].t, null);
  assert.deepEqual(
    await sql`select proname, md5(prosrc) as src from pg_proc where pronamespace = 'pgflow'::regnamespace order by 1, 2`,
    functionsBefore,
  );
  const versions = (await sql`select version from supabase_migrations.schema_migrations`).map((r) =>
    r.version
  );
  assert.ok(!versions.includes(files[upgradeIndex].version));
  assert.equal((await queueMessages(sql, "kept_q")).length, 1);

  // Once the lock is gone the same upgrade applies.
  await applyMigrations(sql, full);
  assert.equal((await sql`select count(*)::int as n from pgflow.shared_queues`)[0].n, 1);
  await Deno.remove(full, { recursive: true });
}, { fresh: true });
