/**
 * `pgflow queues list|drop` and the lookalike warning of `pgflow plan` and `pgflow compile`,
 * against a real database: a route map with a typo makes a shared queue one letter from the real
 * one; plan and compile say so (a series like `_1`, `_2` does not count); the list shows each
 * queue's kind, routes, unfinished tasks and lookalike; drop refuses a queue a route or a task
 * still uses (naming them), prints what it would drop without --yes, and drops it (queue and
 * declaration) once its flow is deleted.
 */
import assert from "node:assert/strict";
import { Flow, routeFlow, withStepQueues } from "../../mod.ts";
import { lookalikes, oneEditApart } from "../../src/cli/deploy/lookalikes.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { startRun } from "../worker/helpers.ts";
import { flowsModule } from "./deploy_helpers.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const cli = (url: string, ...args: string[]) => runCli([...args, "--database-url", url]);

Deno.test("one edit apart: inserted, removed, replaced or swapped; a digit for a digit is a series", () => {
  for (
    const [a, b] of [
      ["thread_procesing", "thread_processing"],
      ["thread_processingg", "thread_processing"],
      ["thraed_processing", "thread_processing"],
      ["thread_prucessing", "thread_processing"],
    ]
  ) {
    assert.ok(oneEditApart(a, b), `${a} ~ ${b}`);
    assert.ok(oneEditApart(b, a), `${b} ~ ${a}`);
  }
  for (
    const [a, b] of [
      ["shard_1", "shard_2"],
      ["same", "same"],
      ["thread_processing", "slack_delivery"],
      ["ab", "abcd"],
      ["abc", "cab"],
    ]
  ) {
    assert.ok(!oneEditApart(a, b), `${a} !~ ${b}`);
  }
  assert.deepEqual(lookalikes(["q_wrok", "q_2"], ["q_work", "q_1", "q_wrok"]), [
    { queue: "q_wrok", like: "q_work" },
  ]);
});

const work = routeFlow(
  new Flow<{ n: number }>({ slug: "cq_good" }).step({ slug: "a" }, (i) => i.n),
  { queues: { a: "cq_work" } },
);
const typo = routeFlow(
  new Flow<{ n: number }>({ slug: "cq_typo" }).step({ slug: "a" }, (i) => i.n),
  { queues: { a: "cq_wrok" } },
);

db.test(
  "plan and compile warn of a new shared queue one letter from an existing one",
  async ({ sql, url }) => {
    await compileFlow(sql, work);
    const module = await flowsModule(`
export const typo = routeFlow(new Flow({ slug: "cq_typo" }).step({ slug: "a" }, () => 1), { queues: { a: "cq_wrok" } });
export const series = routeFlow(new Flow({ slug: "cq_series" }).step({ slug: "a" }, () => 1), { queues: { a: "cq_shard_2" } });
`);
    await sql`select pgmq.create('cq_shard_1')`;
    const warning =
      /the new shared queue cq_wrok is one letter from the queue cq_work: a typo in a route map\?/;
    const planned = await cli(url, "plan", module);
    assert.equal(planned.code, 0, shown(planned));
    assert.match(planned.stdout, new RegExp(`^warning\\s+${warning.source}`, "m"));
    assert.equal(
      planned.stdout.match(/^warning/gm)?.length,
      1,
      "cq_shard_2 is a series, not a typo",
    );
    const json = JSON.parse((await cli(url, "plan", module, "--json")).stdout);
    assert.deepEqual(json.lookalikes, [{ queue: "cq_wrok", like: "cq_work" }]);

    const compiled = await cli(url, "compile", module, "--json");
    assert.equal(compiled.code, 0, shown(compiled));
    assert.match(compiled.stderr, new RegExp(`warning: ${warning.source}`));
    assert.deepEqual(JSON.parse(compiled.stdout).lookalikes, [{
      queue: "cq_wrok",
      like: "cq_work",
    }]);
    const again = await cli(url, "compile", module);
    assert.doesNotMatch(again.stderr, /warning/, "only a new queue is warned of");
  },
  { fresh: true },
);

db.test(
  "queues list shows kinds, routes, tasks and lookalikes; drop refuses a queue in use",
  async ({ sql, url }) => {
    await compileFlow(sql, work);
    await compileFlow(sql, typo);
    await compileFlow(
      sql,
      new Flow<{ n: number }>({ slug: "cq_plain" }).step({ slug: "a" }, () => 1),
    );
    await compileFlow(
      sql,
      withStepQueues(new Flow<{ n: number }>({ slug: "cq_private" }).step({ slug: "a" }, () => 1)),
    );
    await sql`select pgmq.create('cq_external')`;
    await sql`select pgmq.send('cq_external', '{}'::jsonb)`;
    await startRun(sql, "cq_typo", { n: 1 });

    const listed = await cli(url, "queues", "list");
    assert.equal(listed.code, 0, shown(listed));
    const row = (queue: string) => new RegExp(`^${queue}\\s+.*$`, "m").exec(listed.stdout)?.[0];
    assert.match(row("cq_work")!, /^cq_work\s+shared\s+0\s+0\s+0\s+cq_good\/a\s+like cq_wrok$/);
    assert.match(row("cq_wrok")!, /^cq_wrok\s+shared\s+1\s+0\s+1\s+cq_typo\/a\s+like cq_work$/);
    assert.match(row("cq_plain")!, /^cq_plain\s+flow\s+0\s+0\s+0\s+cq_plain\/a$/);
    assert.match(row("cq_private__a")!, /^cq_private__a\s+private\s+0\s+0\s+0\s+cq_private\/a$/);
    assert.match(row("cq_external")!, /^cq_external\s+external\s+1\s+0\s+0\s+-$/);
    const json = JSON.parse((await cli(url, "queues", "list", "--json")).stdout);
    assert.deepEqual(json.queues.find((q: { queue: string }) => q.queue === "cq_wrok"), {
      queue: "cq_wrok",
      kind: "shared",
      messages: 1,
      liveWorkers: 0,
      routes: ["cq_typo/a"],
      unfinishedTasks: 1,
      like: "cq_work",
    });

    const refused = await cli(url, "queues", "drop", "cq_wrok", "--yes");
    assert.equal(refused.code, 1, shown(refused));
    assert.match(
      refused.stderr,
      /queue cq_wrok is still used by routes of cq_typo\/a and unfinished tasks of run \S+ \(a: 1\); nothing was dropped\. .*pgflow\.delete_flow_and_data/,
    );
    assert.equal(
      (await sql`select 1 from pgmq.list_queues() where queue_name = 'cq_wrok'`).length,
      1,
    );

    const planned = await cli(url, "queues", "drop", "cq_external");
    assert.equal(planned.code, 4, shown(planned));
    assert.match(
      planned.stdout,
      /would drop queue cq_external, with its 1 message\(s\) and its archive/,
    );
    assert.equal(
      (await sql`select 1 from pgmq.list_queues() where queue_name = 'cq_external'`).length,
      1,
      "nothing was done without --yes",
    );
    const external = await cli(url, "queues", "drop", "cq_external", "--yes");
    assert.equal(external.code, 0, shown(external));

    // The typo'd version deleted (its run with it), its queue can go, declaration and all.
    await sql`select pgflow.delete_flow_and_data('cq_typo')`;
    const dropped = await cli(url, "queues", "drop", "cq_wrok", "--yes", "--json");
    assert.equal(dropped.code, 0, shown(dropped));
    assert.deepEqual(JSON.parse(dropped.stdout), { queue: "cq_wrok", dropped: true, messages: 0 });
    const [left] = await sql`
    select (select count(*)::int from pgmq.list_queues() where queue_name in ('cq_wrok', 'cq_external')) as queues,
           (select count(*)::int from pgflow.shared_queues where queue_name = 'cq_wrok') as declared`;
    assert.deepEqual({ ...left }, { queues: 0, declared: 0 });

    const missing = await cli(url, "queues", "drop", "cq_wrok");
    assert.equal(missing.code, 3, shown(missing));
    assert.match(missing.stderr, /there is no queue cq_wrok/);
  },
  { fresh: true },
);
