/**
 * The commands the CLI suggests work from where it was run and name no path of this machine:
 * `deno task pgflow …` only inside this repository (its deno.json has the task); from any other
 * folder the versioned `jsr:` form (src/operations/schema_version.ts), which a folder set up by
 * `pgflow init` resolves to the checkout before the module is published.
 */
import assert from "node:assert/strict";
import { runCli, shown } from "./helpers.ts";

const REPO = new URL("../../", import.meta.url).pathname;

Deno.test("a hint names a command that exists where the CLI was run", async () => {
  const elsewhere = await Deno.makeTempDir();
  try {
    const missing = `${elsewhere}/no-db`;
    const outside = await runCli(["db", "status", "--data-dir", missing], { cwd: elsewhere });
    assert.match(
      outside.stderr,
      /create one with `deno run -A jsr:@pgflow\/shared@\d+\.\d+\.\d+\/cli db start`/,
      shown(outside),
    );
    assert.doesNotMatch(outside.stderr, /deno task pgflow/);
    assert.ok(!outside.stderr.includes(REPO), `a path of this checkout: ${shown(outside)}`);
    const inside = await runCli(["db", "status", "--data-dir", missing], { cwd: REPO });
    assert.match(inside.stderr, /create one with `deno task pgflow db start`/, shown(inside));
  } finally {
    await Deno.remove(elsewhere, { recursive: true });
  }
});
