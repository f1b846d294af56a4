/**
 * `pgflow compile <module>`: compiles the flows a module exports as a starting worker would,
 * without starting one; identical flows are verified; a refused flow changes nothing at all (all
 * or nothing), with the differences and exit 1.
 */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { runCli, shown } from "./helpers.ts";
import { flowsModule } from "./deploy_helpers.ts";

const db = testDatabase(import.meta.url);

db.test("compile creates, then verifies; a refused flow changes nothing (exit 1)", async ({ sql, url }) => {
  const module = await flowsModule(`
    export const routed = routeFlow(new Flow({ slug: "cp_one" }).step({ slug: "a" }, () => 1),
      { queues: { a: "cp_work" } });
    export const steps = withStepQueues(new Flow({ slug: "cp_two" }).step({ slug: "a" }, () => 1));`);
  const first = await runCli(["compile", module, "--database-url", url]);
  assert.equal(first.code, 0, shown(first));
  assert.match(first.stdout, /^compiled\s+cp_one$/m);
  assert.match(first.stdout, /^compiled\s+cp_two$/m);
  const queues = await sql<{ name: string }[]>`
    select queue_name::text as name from pgmq.list_queues() where queue_name like 'cp%' order by 1`;
  assert.ok(queues.some((q) => q.name === "cp_work"), JSON.stringify(queues));
  assert.ok(queues.some((q) => q.name.startsWith("cp_two__")), JSON.stringify(queues));
  const [{ workers }] = await sql<{ workers: number }[]>`
    select count(*)::int as workers from pgflow.workers`;
  assert.equal(workers, 0, "compile starts no worker");

  const again = await runCli(["compile", module, "--database-url", url, "--json"]);
  assert.equal(again.code, 0, shown(again));
  assert.deepEqual(JSON.parse(again.stdout).flows, [
    { slug: "cp_one", status: "verified" },
    { slug: "cp_two", status: "verified" },
  ]);

  // cp_one changed, cp_three new: refused, and cp_three is not created either.
  const changed = await flowsModule(`
    export const routed = routeFlow(new Flow({ slug: "cp_one" }).step({ slug: "a" }, () => 1)
      .step({ slug: "b", dependsOn: ["a"] }, () => 2), { queues: { a: "cp_work", b: "cp_work" } });
    export const fresh = new Flow({ slug: "cp_three" }).step({ slug: "a" }, () => 1);`);
  const refused = await runCli(["compile", changed, "--database-url", url]);
  assert.equal(refused.code, 1, shown(refused));
  assert.match(
    refused.stderr,
    /^pgflow: error: the supplied definitions differ from the stored ones/,
  );
  assert.match(refused.stderr, /^ {2}cp_one: /m);
  assert.match(refused.stderr, /nothing was changed \(pgflow compile is all or nothing\)$/m);
  const [{ three }] = await sql<{ three: number }[]>`
    select count(*)::int as three from pgflow.flows where flow_slug = 'cp_three'`;
  assert.equal(three, 0, "a refused compile creates nothing");
  const [{ queue }] = await sql<{ queue: number }[]>`
    select count(*)::int as queue from pgmq.list_queues() where queue_name = 'cp_three'`;
  assert.equal(queue, 0);
});
