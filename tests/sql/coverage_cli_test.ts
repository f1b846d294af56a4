/** `deno task coverage` in a scripted scenario: a missing handler, then a stopped worker. */
import assert from "node:assert/strict";
import { testDatabase } from "../support/db.ts";
import { defineFlow } from "../support/engine.ts";

const db = testDatabase(import.meta.url);
const CLI = new URL("../../src/operations/coverage_cli.ts", import.meta.url).pathname;

async function coverage(url: string, ...args: string[]) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CLI, ...args],
    env: { DATABASE_URL: url },
    stdout: "piped",
    stderr: "piped",
  }).output();
  return {
    code: out.code,
    text: new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr),
  };
}

db.test("the coverage command flags a missing handler and a stopped worker", async ({ sql, url }) => {
  await defineFlow(sql, "cli_v1", [
    { slug: "classify", queue: "cli_shared" },
    { slug: "deliver", deps: ["classify"], queue: "cli_slack" },
  ], { mode: "routed" });
  const shared = crypto.randomUUID();
  await sql`select pgflow.register_worker(${shared}, 'cli_shared', 'fn_cli', '[["cli_v1", "classify"]]')`;

  const first = await coverage(url);
  assert.equal(first.code, 1, first.text);
  assert.match(first.text, /cli_shared\s+cli_v1\s+classify\s+yes\s+0\s+0\s+1\s+ok/);
  assert.match(first.text, /cli_slack\s+cli_v1\s+deliver\s+yes\s+0\s+0\s+0\s+MISSING/);
  assert.match(first.text, /1 pair\(s\) without a live worker/);

  await sql`select pgflow.register_worker(gen_random_uuid(), 'cli_slack', 'fn_cli', '[["cli_v1", "deliver"]]')`;
  const covered = await coverage(url, "--queue", "cli_slack");
  assert.equal(covered.code, 0, covered.text);
  assert.doesNotMatch(covered.text, /cli_shared/);

  await sql`select pgflow.mark_worker_stopped(${shared})`;
  const stopped = await coverage(url, "--queue", "cli_shared");
  assert.equal(stopped.code, 1);
  assert.match(stopped.text, /cli_shared\s+cli_v1\s+classify\s+yes\s+0\s+0\s+0\s+MISSING/);

  const bad = await coverage(url, "--queue");
  assert.equal(bad.code, 2);
  assert.match(bad.text, /usage: deno task coverage/);
});
