/**
 * Flow control's options from the DSL to SQL: the compiler stores a step's priority, scope and key
 * with a new version, applies changed limits to an existing one (no new version needed), shares a
 * default scope between the versions of one alias, and refuses bad values naming the step, the
 * option and the fix, as the DSL does before it.
 */
import assert from "node:assert/strict";
import { Flow, FlowDefinitionError, routeFlow } from "../../mod.ts";
import { FLOW_CONTROL_BOUNDS } from "../../src/dsl/flow_control.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

function version(slug: string, limit: number) {
  const flow = new Flow<{ channel: string }>({ slug, alias: "notify", priority: 2 })
    .step({ slug: "send", concurrency: { limit, key: "$.channel" } }, () => 1)
    .step({ slug: "log", dependsOn: ["send"], priority: -5 }, () => 2);
  return routeFlow(flow, { queues: { send: "fc_q", log: "fc_q" } });
}

db.test("SQL's bounds are the DSL's", async ({ sql }) => {
  const [{ b }] = await sql`select pgflow.flow_control_bounds() as b`;
  assert.deepEqual(b, JSON.parse(JSON.stringify(FLOW_CONTROL_BOUNDS)));
});

db.test("a compile stores flow control; a later compile changes the limit, and versions of an alias share it", async ({ sql }) => {
  assert.equal((await compileFlow(sql, version("notify_v1", 3))).status, "compiled");
  const steps =
    await sql`select step_slug, priority, concurrency_scope, concurrency_key::text as key,
                                 concurrency_key_from from pgflow.steps where flow_slug = 'notify_v1'
                          order by step_index`;
  assert.deepEqual(
    steps.map((s) => [s.step_slug, s.priority, s.concurrency_scope, s.key, s.concurrency_key_from]),
    [
      ["send", 2, "notify/send", '$."channel"', "run"],
      ["log", -5, null, null, null],
    ],
  );
  const limit = async () =>
    (await sql`select max_running from pgflow.concurrency_limits where scope = 'notify/send'`)[0]
      .max_running;
  assert.equal(await limit(), 3);
  const again = await compileFlow(sql, version("notify_v1", 5));
  assert.equal(again.status, "verified");
  assert.deepEqual(again.optionDifferences, [], "a limit is not drift: it is applied");
  assert.equal(await limit(), 5);
  assert.equal((await compileFlow(sql, version("notify_v2", 4))).status, "compiled");
  assert.equal(await limit(), 4, "v2 shares v1's budget");
  const [{ n }] = await sql`select count(*)::int as n from pgflow.concurrency_limits`;
  assert.equal(n, 1);
});

db.test("the compiler refuses bad flow control naming the step, the option and the fix", async ({ sql }) => {
  const shape = {
    steps: [{
      slug: "a",
      index: 0,
      stepType: "single",
      dependencies: [],
      whenUnmet: "skip",
      whenExhausted: "fail",
      requiredInputPattern: { defined: false },
      forbiddenInputPattern: { defined: false },
    }],
  };
  const plan = { mode: "routed", queues: { a: "fc_bad_q" } };
  const cases: [unknown, RegExp][] = [
    [
      { concurrency: { limit: 0 } },
      /step a: concurrency\.limit must be an integer between 1 and 100000/,
    ],
    [
      { concurrency: { limit: 2, key: "$.x[" } },
      /step a: concurrency\.key "\$\.x\[" is not a JSON path/,
    ],
    [{ concurrency: 3 }, /step a: concurrency must be an object/],
    [{ priority: 1.5 }, /step a: priority must be an integer between -1000 and 1000/],
  ];
  for (const [options, message] of cases) {
    await assert.rejects(
      sql`select pgflow.ensure_flow_compiled('fc_bad', ${sql.json(shape)}, ${sql.json(plan)},
        ${sql.json({ flow: {}, steps: { a: options } } as never)})`,
      message,
    );
  }
  assert.equal(
    (await sql`select count(*)::int as n from pgflow.flows where flow_slug = 'fc_bad'`)[0].n,
    0,
  );
});

Deno.test("the DSL refuses bad flow control at definition, naming the option and the fix", () => {
  const bad: [Record<string, unknown>, RegExp][] = [
    [{ concurrency: 0 }, /concurrency is 0, but it must be an integer between 1 and 100000/],
    [
      { concurrency: { limit: 2, key: "customerId" } },
      /concurrency\.key is "customerId", not a JSON path; write e\.g\. key: "\$\.customerId"/,
    ],
    [{ concurrency: { limit: 2, keyFrom: "input" } }, /keyFrom needs a key/],
    [{ concurrency: { limit: 2, scope: "a/b" } }, /concurrency\.scope is "a\/b"/],
    [{ concurrency: { limit: 2, per: 1 } }, /unknown option "per"/],
    [{ priority: 1001 }, /priority is 1001, but it must be an integer between -1000 and 1000/],
  ];
  for (const [options, message] of bad) {
    assert.throws(
      () => new Flow({ slug: "f" }).step({ slug: "a", ...options }, () => 1),
      (e: unknown) =>
        e instanceof FlowDefinitionError && message.test(e.message) && /step "a"/.test(e.message),
      JSON.stringify(options),
    );
  }
  assert.throws(() => new Flow({ slug: "f", concurrency: -1 }), /flow "f": concurrency is -1/);
});
