/**
 * `pgflow aliases list|activate` against a real database: the list (text and JSON), and an
 * activation that behaves as `pgflow.activate_alias`: refused while no live worker serves a step
 * of the new version (nothing changed), refused when the alias no longer points where `--from`
 * says (compare-and-swap), moved with `--force` (the uncovered steps named and recorded), moved
 * back once the version is served, and usage and unknown names with their exit codes.
 */
import assert from "node:assert/strict";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { compileFlow } from "../support/engine.ts";
import { startWorker, stopAll } from "../worker/helpers.ts";
import { orderV1, orderV2 } from "./fixtures/orders.ts";
import { runCli, shown } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const aliases = (url: string, ...args: string[]) =>
  runCli(["aliases", ...args, "--database-url", url]);

db.test("aliases list, and activate with the coverage check and compare-and-swap", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const target = async () =>
    (await sql`select flow_slug from pgflow.aliases where alias = 'co_order'`)[0].flow_slug;
  try {
    const none = await aliases(url, "list");
    assert.equal(none.code, 3, shown(none));
    await compileFlow(sql, orderV1);
    await compileFlow(sql, orderV2);
    await startWorker(workers, orderV1, { connectionString: url });

    const listed = await aliases(url, "list");
    assert.equal(listed.code, 0, shown(listed));
    assert.match(listed.stdout, /^alias\s+starts\s+other versions\s+moved$/m);
    assert.match(listed.stdout, /^co_order\s+co_order_v1\s+co_order_v2\s+\d{4}-/m);
    const json = JSON.parse((await aliases(url, "list", "--json")).stdout);
    assert.deepEqual(
      json.aliases.map((a: Record<string, unknown>) => [a.alias, a.target, a.versions]),
      [["co_order", "co_order_v1", ["co_order_v1", "co_order_v2"]]],
    );

    const uncovered = await aliases(url, "activate", "co_order", "co_order_v2");
    assert.equal(uncovered.code, 1, shown(uncovered));
    assert.match(
      uncovered.stderr,
      /no live worker serves co_order_v2\/check on co_order_v2 of co_order_v2; nothing changed; .*or pass --force/,
    );
    assert.equal(await target(), "co_order_v1");

    const lost = await aliases(url, "activate", "co_order", "co_order_v2", "--from", "co_order_v2");
    assert.equal(lost.code, 1, shown(lost));
    assert.match(lost.stderr, /points at co_order_v1, not co_order_v2: another activation won/);
    assert.equal(await target(), "co_order_v1");

    const forced = await aliases(url, "activate", "co_order", "co_order_v2", "--force", "--json");
    assert.equal(forced.code, 0, shown(forced));
    const moved = JSON.parse(forced.stdout);
    assert.deepEqual(
      [moved.from, moved.to, moved.forced, moved.activated, moved.uncovered],
      [
        "co_order_v1",
        "co_order_v2",
        true,
        true,
        [{ queue: "co_order_v2", flow: "co_order_v2", step: "check" }],
      ],
    );
    assert.equal(await target(), "co_order_v2");
    const already = await aliases(url, "activate", "co_order", "co_order_v2");
    assert.equal(already.code, 0, shown(already));
    assert.match(already.stdout, /co_order points at co_order_v2 already; nothing was changed/);

    // v1 is served: back without --force, naming where it was.
    const back = await aliases(url, "activate", "co_order", "co_order_v1", "--from", "co_order_v2");
    assert.equal(back.code, 0, shown(back));
    assert.equal(back.stdout.trim(), "co_order: co_order_v2 → co_order_v1");
    const [{ n }] = await sql`select count(*)::int as n from pgflow.alias_activations
                              where alias = 'co_order'`;
    assert.equal(n, 2, "each activation recorded, the refused ones not");

    const unknown = await aliases(url, "activate", "no_such_alias", "co_order_v1");
    assert.equal(unknown.code, 3, shown(unknown));
    assert.match(unknown.stderr, /there is no alias no_such_alias/);
    const notVersion = await aliases(url, "activate", "co_order", "co_idle");
    assert.equal(notVersion.code, 1, shown(notVersion));
    assert.match(notVersion.stderr, /co_idle is not a compiled version of it/);
    const usage = await aliases(url, "activate", "co_order");
    assert.equal(usage.code, 2, shown(usage));
    assert.match(usage.stderr, /needs the alias and the version to point it at/);
  } finally {
    await stopAll(workers);
  }
});
