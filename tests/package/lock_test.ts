/**
 * The first `deno task demo` on a fresh machine prints only the demo. `deno task` installs every
 * npm package of `deno.lock` into the cache before it runs a task, and prints a boxed "Ignored
 * build scripts" warning the first time it installs one whose lock entry has `scripts`: a
 * newcomer reads that as an error. The npm-packaged Postgres server (the one such package) is
 * loaded with `--no-lock` when it is needed, so it never belongs in the lock.
 */
import assert from "node:assert/strict";
import { REPO_ROOT } from "./deno_cmd.ts";

Deno.test("deno.lock holds no npm package with build scripts (no warning on the first run)", () => {
  const lock = JSON.parse(Deno.readTextFileSync(`${REPO_ROOT}deno.lock`));
  const withScripts = Object.entries(lock.npm ?? {})
    .filter(([, entry]) => (entry as { scripts?: boolean }).scripts)
    .map(([name]) => name);
  assert.deepEqual(withScripts, [], "remove these from deno.lock (load them with --no-lock)");
});
