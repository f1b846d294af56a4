/**
 * Aliases from the client and the rollout guide of docs/operations.md, end to end with work in
 * flight: callers start the alias, v2's workers are deployed beside v1's, the alias is activated
 * only once v2's handlers are live, v1 drains, and no run is lost or started on a version whose
 * handlers are missing.
 */
import assert from "node:assert/strict";
import { expectTypeOf } from "expect-type";
import { createClient, Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

function versions(prefix: string) {
  const v1 = routeFlow(
    new Flow<{ n: number }>({ slug: `${prefix}_v1`, alias: `${prefix}_triage` })
      .step({ slug: "classify" }, (i) => ({ v1: i.n })),
    { queues: { classify: `${prefix}_work` } },
  );
  const v2 = routeFlow(
    new Flow<{ n: number }>({ slug: `${prefix}_v2`, alias: `${prefix}_triage` })
      .step({ slug: "classify" }, (i) => ({ v2: String(i.n) })),
    { queues: { classify: `${prefix}_work` } },
  );
  return { v1, v2 };
}

db.test("client: a run started through an alias is its target's, typed as the union of the versions", async ({ sql, url }) => {
  const { v1, v2 } = versions("ca");
  const workers: FlowWorker[] = [];
  const client = createClient({ connectionString: url });
  try {
    await startWorker(workers, [v1, v2], { connectionString: url, queueName: "ca_work" });
    const run = await client.startFlow<typeof v1 | typeof v2>("ca_triage", { n: 1 });
    const output = await run.waitFor("completed", { timeoutMs: 60_000 });
    expectTypeOf(output).toEqualTypeOf<
      { classify: { v1: number } } | { classify: { v2: string } }
    >();
    const done = await run.state();
    assert.deepEqual([done.flowSlug, done.startedAs, output], [
      "ca_v1",
      "ca_triage",
      { classify: { v1: 1 } },
    ]);
    // Idempotent through the alias: the same id is the same run, not an error.
    const runId = crypto.randomUUID();
    const first = await client.startFlow<typeof v1>("ca_triage", { n: 2 }, { runId });
    const again = await client.startFlow<typeof v1>("ca_triage", { n: 2 }, { runId });
    assert.equal(again.runId, first.runId);
    await again.waitFor("completed", { timeoutMs: 60_000 });
    assert.equal((await again.state()).flowSlug, "ca_v1");
    // After an activation the alias starts v2.
    await sql`select pgflow.activate_alias('ca_triage', 'ca_v1', 'ca_v2')`;
    const next = await client.startFlow<typeof v2>("ca_triage", { n: 3 });
    const out = await next.waitFor("completed", { timeoutMs: 60_000 });
    assert.deepEqual([(await next.state()).flowSlug, out], ["ca_v2", { classify: { v2: "3" } }]);
  } finally {
    await client.close();
    await stopAll(workers);
  }
});

db.test("rollout: v2 deployed beside v1, activated once served, v1 drained: no run lost, none on a version without handlers", async ({ sql, url }) => {
  const { v1, v2 } = versions("ro");
  const old: FlowWorker[] = [];
  const fresh: FlowWorker[] = [];
  const client = createClient({ connectionString: url });
  const started: { runId: string; at: number }[] = [];
  let streaming = true;
  try {
    await startWorker(old, [v1], { connectionString: url, queueName: "ro_work" });
    // Callers start the alias, steadily, through the whole rollout.
    const stream = (async () => {
      while (streaming) {
        const run = await client.startFlow<typeof v1 | typeof v2>("ro_triage", {
          n: started.length,
        });
        started.push({ runId: run.runId, at: performance.now() });
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    await waitFor(() => started.length >= 10, { what: "runs on v1" });
    // 1. Deploy v2's workers beside v1's (they carry both versions). Compiling v2 does not move
    //    the alias.
    await startWorker(fresh, [v1, v2], { connectionString: url, queueName: "ro_work" });
    const [{ a }] =
      await sql`select a from pgflow.list_aliases() a where a ->> 'alias' = 'ro_triage'`;
    assert.deepEqual([a.flow_slug, a.versions], ["ro_v1", ["ro_v1", "ro_v2"]]);
    // 2. Check coverage and activate, compare-and-swap from v1.
    const [{ moved }] =
      await sql`select pgflow.activate_alias('ro_triage', 'ro_v1', 'ro_v2') as moved`;
    assert.deepEqual(moved.uncovered, []);
    const activatedAt = started.length;
    await waitFor(() => started.length >= activatedAt + 10, { what: "runs on v2" });
    // 3. Retire v1's workers: they stop polling and finish what they hold.
    await stopAll(old);
    await waitFor(() => started.length >= activatedAt + 20, { what: "more runs" });
    streaming = false;
    await stream;
    // 4. Every run completes; those started before the activation ran v1, after it v2.
    const ids = started.map((s) => s.runId);
    const rows = await waitFor(async () => {
      const r = await sql<{ run_id: string; flow_slug: string; status: string }[]>`
        select run_id, flow_slug, status from pgflow.runs where run_id = any (${ids}::uuid[])`;
      return r.length === ids.length && r.every((x) => x.status === "completed") ? r : undefined;
    }, { what: "every run to complete", timeoutMs: 60_000 });
    const byId = new Map(rows.map((r) => [r.run_id, r.flow_slug]));
    const versionsSeen = ids.map((id) => byId.get(id));
    const firstV2 = versionsSeen.indexOf("ro_v2");
    // The stream has one start in flight at any moment: it may have begun before the alias moved
    // (a v1 run) and be counted after.
    assert.ok(
      firstV2 > 0 && firstV2 <= activatedAt + 1,
      `first v2 run at ${firstV2}, activated at ${activatedAt}`,
    );
    assert.ok(versionsSeen.slice(0, firstV2).every((v) => v === "ro_v1"));
    assert.ok(versionsSeen.slice(firstV2).every((v) => v === "ro_v2"));
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                              where run_id = any (${ids}::uuid[]) and started_as = 'ro_triage'`;
    assert.equal(n, ids.length);
  } finally {
    streaming = false;
    await client.close();
    await stopAll([...old, ...fresh]);
  }
});

db.test("rollout: activating a version whose handlers are not deployed is refused, and nothing starts on it", async ({ sql, url }) => {
  const { v1, v2 } = versions("rf");
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, [v1], { connectionString: url, queueName: "rf_work" });
    // v2 compiled (say by a CI step), but no worker serves it.
    const compile = await import("../support/engine.ts");
    await compile.compileFlow(sql, v2);
    await assert.rejects(
      sql`select pgflow.activate_alias('rf_triage', 'rf_v1', 'rf_v2')`,
      /no live worker serves rf_v2\/classify on rf_work/,
    );
    const [run] = await sql`select flow_slug from pgflow.start_flow('rf_triage', '{"n": 1}')`;
    assert.equal(run.flow_slug, "rf_v1");
  } finally {
    await stopAll(workers);
  }
});
