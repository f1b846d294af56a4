/**
 * The commands the CLI suggests work from where it was run: `deno task pgflow …` only inside this
 * repository (its deno.json has the task); from any other folder the checkout's `deno run -A
 * <path>/src/cli/main.ts …`. (From jsr: the versioned `jsr:` form, src/operations/schema_version.ts.)
 */
import assert from "node:assert/strict";
import { runCli, shown } from "./helpers.ts";

const MAIN = new URL("../../src/cli/main.ts", import.meta.url).pathname;
const REPO = new URL("../../", import.meta.url).pathname;

Deno.test("a hint names a command that exists where the CLI was run", async () => {
  const elsewhere = await Deno.makeTempDir();
  try {
    const missing = `${elsewhere}/no-db`;
    const outside = await runCli(["db", "status", "--data-dir", missing], { cwd: elsewhere });
    assert.match(
      outside.stderr,
      new RegExp(`create one with \`deno run -A ${MAIN} db start\``),
      shown(outside),
    );
    assert.doesNotMatch(outside.stderr, /deno task pgflow/);
    const inside = await runCli(["db", "status", "--data-dir", missing], { cwd: REPO });
    assert.match(inside.stderr, /create one with `deno task pgflow db start`/, shown(inside));
  } finally {
    await Deno.remove(elsewhere, { recursive: true });
  }
});
