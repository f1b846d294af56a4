/**
 * A client given the versions' flow objects (`createClient({ …, flows })`) checks an input started
 * by name: through an alias with the schema of the version the alias points at now (before and
 * after an activation), by slug with that flow's; no run is made for a bad input. A name whose
 * flow it was not given goes unchecked, as before. An alias filters `listRuns` as a slug does (the
 * runs of every version carrying it). `retry({ input })` runs a failed run again with
 * a corrected input, linked to its source; given the flow, the client checks that input too.
 */
import assert from "node:assert/strict";
import { z } from "npm:zod@3.24.2";
import {
  ClientConfigError,
  createClient,
  Flow,
  type FlowWorker,
  InputValidationError,
} from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";

const db = testDatabase(import.meta.url);

const v1 = new Flow({
  slug: "sbn_order_v1",
  alias: "sbn_order",
  input: z.object({ id: z.number() }),
})
  .step({ slug: "a" }, (input) => input.id);
const v2 = new Flow({
  slug: "sbn_order_v2",
  alias: "sbn_order",
  input: z.object({ id: z.number(), email: z.string().email() }),
}).step({ slug: "a" }, (input) => input.email);

const runsOf = async (sql: Parameters<Parameters<typeof db.test>[1]>[0]["sql"]) =>
  (await sql<{ n: number }[]>`
    select count(*)::int as n from pgflow.runs where started_as = 'sbn_order'
      or flow_slug like 'sbn_order_%'`)[0].n;

db.test("through an alias, the input is checked with the schema of the version it points at now", async ({ sql, url }) => {
  await compileFlow(sql, v1);
  await compileFlow(sql, v2);
  const client = createClient({ connectionString: url, flows: [v1, v2] });
  try {
    // The alias points at v1 (the first version compiled).
    await assert.rejects(
      client.startFlow<typeof v1 | typeof v2>("sbn_order", { id: "seven" } as never),
      (e: unknown) => {
        assert.ok(e instanceof InputValidationError, String(e));
        assert.equal(e.flowSlug, "sbn_order");
        assert.deepEqual(e.issues.map((i) => i.path), [["id"]]);
        return true;
      },
    );
    assert.equal(await runsOf(sql), 0, "no run was made");
    const ok = await client.startFlow<typeof v1 | typeof v2>("sbn_order", { id: 7 });
    assert.equal((await ok.state()).flowSlug, "sbn_order_v1");

    // Moved to v2 (no worker serves it here: forced), v1's input is no longer enough.
    await sql`select pgflow.activate_alias('sbn_order', 'sbn_order_v1', 'sbn_order_v2', force => true)`;
    await assert.rejects(
      client.startFlow<typeof v1 | typeof v2>("sbn_order", { id: 8 }),
      (e: unknown) =>
        e instanceof InputValidationError && e.issues.some((i) => i.path.join() === "email"),
    );
    const next = await client.startFlow<typeof v1 | typeof v2>("sbn_order", {
      id: 8,
      email: "ada@example.com",
    });
    assert.equal((await next.state()).flowSlug, "sbn_order_v2");

    // By slug: that version's schema.
    await assert.rejects(
      client.startFlow("sbn_order_v2", { id: 9 }),
      (e: unknown) => e instanceof InputValidationError && e.flowSlug === "sbn_order_v2",
    );
    assert.equal(await runsOf(sql), 2, "only the two good inputs made runs");
    // An alias filters like a slug: the runs of every version carrying it.
    const listed = await client.listRuns({ flow: "sbn_order" });
    assert.deepEqual(listed.map((r) => r.runId).sort(), [ok.runId, next.runId].sort());
    assert.deepEqual(
      (await client.listRuns({ flow: "sbn_order_v1" })).map((r) => r.runId),
      [ok.runId],
      "a slug still names one version",
    );
  } finally {
    await client.close();
  }

  // Without the flows, a name carries no schema: the run is made (the worker would fail it).
  const plain = createClient({ connectionString: url });
  try {
    const unchecked = await plain.startFlow("sbn_order", { id: 10 });
    assert.equal((await unchecked.state()).flowSlug, "sbn_order_v2");
  } finally {
    await plain.close();
  }
});

Deno.test("flows must be flows, each slug once", () => {
  const url = "postgres://postgres@127.0.0.1:5432/postgres";
  assert.throws(
    () => createClient({ connectionString: url, flows: v1 as never }),
    (e: unknown) =>
      e instanceof ClientConfigError && /flows must be an array of flows/.test(e.message),
  );
  assert.throws(
    () => createClient({ connectionString: url, flows: [v1, { slug: "x" }] as never }),
    (e: unknown) => e instanceof ClientConfigError && /flows\[1\] is not a flow/.test(e.message),
  );
  const twin = new Flow<{ id: number }>({ slug: "sbn_order_v1" }).step({ slug: "a" }, () => 1);
  assert.throws(
    () => createClient({ connectionString: url, flows: [v1, twin] }),
    (e: unknown) =>
      e instanceof ClientConfigError &&
      /two different flows with slug "sbn_order_v1"/.test(e.message),
  );
});

const parcel = new Flow({
  slug: "sbn_parcel",
  maxAttempts: 1,
  input: z.object({ weight: z.number().positive() }),
}).step({ slug: "ship" }, (input) => {
  if (input.weight > 30) throw new Error("too heavy for one parcel");
  return input.weight;
});

db.test("retry({ input }) runs a failed run again with a corrected input, linked to its source", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const client = createClient({ connectionString: url, flows: [parcel] });
  try {
    await startWorker(workers, parcel, { connectionString: url });
    const failed = await client.startFlow(parcel, { weight: 40 });
    await failed.waitFor("failed", { timeoutMs: 15_000 });

    await assert.rejects(
      client.run(failed.runId).retry({ input: { weight: -1 } }),
      (e: unknown) => e instanceof InputValidationError && e.flowSlug === "sbn_parcel",
    );
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                              where restart_of_run_id = ${failed.runId}`;
    assert.equal(n, 0, "a bad input makes no run");

    const retried = await client.run(failed.runId).retry({ input: { weight: 12 } });
    assert.deepEqual(await retried.waitFor("completed", { timeoutMs: 15_000 }), { ship: 12 });
    const state = await retried.state();
    assert.deepEqual(
      [state.input, state.restartOfRunId, state.restartMode],
      [{ weight: 12 }, failed.runId, "retry"],
    );
    assert.deepEqual((await failed.state()).input, { weight: 40 }, "the source is unchanged");

    await assert.rejects(
      client.run(failed.runId).resume({ input: { weight: 1 } } as never),
      (e: unknown) => e instanceof ClientConfigError && /input is for retry only/.test(e.message),
    );
  } finally {
    await client.close();
    await stopAll(workers);
  }
});
