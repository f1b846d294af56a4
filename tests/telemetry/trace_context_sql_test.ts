/**
 * The database derives a child run's traceparent (`pgflow._step_traceparent`) exactly as the worker
 * derives span ids (`src/telemetry/span_ids.ts`), so a child-flow step's child run hangs under its
 * parent step's span in the parent's trace; and a child-flow step starts its child with it.
 */
import assert from "node:assert/strict";
import { Flow, routeFlow } from "../../mod.ts";
import { stepTraceparent } from "../../src/telemetry/span_ids.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

db.test("SQL's step traceparent equals the worker's, with and without a run traceparent", async ({ sql }) => {
  const cases: [string, string, string | null][] = [];
  for (let i = 0; i < 200; i++) {
    const runId = crypto.randomUUID();
    const slug = ["a", "enrich", "step_with_a_long_slug_" + i, "é_x"][i % 4];
    const traceparent = i % 3 === 0
      ? null
      : `00-${crypto.randomUUID().replaceAll("-", "")}-${
        crypto.randomUUID().replaceAll("-", "").slice(0, 16)
      }-${i % 2 === 0 ? "01" : "00"}`;
    cases.push([runId, slug, traceparent]);
  }
  const rows = await sql<{ tp: string }[]>`
    select pgflow._step_traceparent(c.run_id, c.slug, c.tp) as tp
    from unnest(${cases.map((c) => c[0])}::uuid[], ${cases.map((c) => c[1])}::text[],
                ${cases.map((c) => c[2])}::text[]) with ordinality as c(run_id, slug, tp, n)
    order by c.n`;
  assert.equal(rows.length, cases.length);
  cases.forEach(([runId, slug, tp], i) => {
    assert.equal(rows[i].tp, stepTraceparent(runId, slug, tp), `case ${i}: ${slug}, ${tp}`);
  });
});

db.test("a child-flow step starts its child under the step's span, in the parent's trace", async ({ sql }) => {
  const child = new Flow<{ id: string }>({ slug: "tc_child_v1" })
    .step({ slug: "only" }, (input) => input.id);
  const parent = new Flow<{ id: string }>({ slug: "tc_parent_v1" })
    .subflow({ slug: "sub", flow: child });
  for (const flow of [child, parent]) {
    const queues = Object.fromEntries(flow.stepOrder.map((s) => [s, "tc_queue"]));
    await compileFlow(sql, routeFlow(flow, { queues } as never));
  }
  const callerTp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
  for (const tp of [callerTp, null]) {
    const [{ run_id }] = await sql<{ run_id: string }[]>`
      select (pgflow.start_flow('tc_parent_v1', '{"id":"x"}'::jsonb, traceparent => ${tp})).run_id`;
    const [kid] = await sql<{ traceparent: string }[]>`
      select traceparent from pgflow.runs where parent_run_id = ${run_id}`;
    assert.equal(kid.traceparent, stepTraceparent(run_id, "sub", tp));
    const traceId = tp === null ? run_id.replaceAll("-", "") : callerTp.slice(3, 35);
    assert.equal(kid.traceparent.slice(3, 35), traceId);
  }
});
