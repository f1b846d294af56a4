/**
 * docs/flows.md's "Testing a flow without a database" example runs as written: its test file is
 * written next to this repository's deno.json (which resolves `@pgflow/shared` and
 * `@pgflow/shared/testing` to this checkout) and run with `deno test`.
 */
import { assertSucceeded, deno, REPO_ROOT } from "../package/deno_cmd.ts";
import { blockNamed, codeBlocks } from "./markdown.ts";

Deno.test("flows.md: the in-memory test example passes", async () => {
  const guide = Deno.readTextFileSync(`${REPO_ROOT}docs/flows.md`);
  const example = blockNamed(codeBlocks(guide), "ts", "flows_in_memory_test.ts");
  const dir = await Deno.makeTempDir({ dir: `${REPO_ROOT}tests/docs`, prefix: ".guide_" });
  try {
    const file = `${dir}/flows_in_memory_test.ts`;
    await Deno.writeTextFile(file, example.code);
    assertSucceeded(
      "deno test of the guide's example",
      await deno(["test", "--no-lock", "-A", file], { cwd: REPO_ROOT }),
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
