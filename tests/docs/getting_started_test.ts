/**
 * docs/getting-started.md runs as written: its function (`index.ts`), its `deno.json` (the JSR
 * import line users write) and its `config.toml` entry are written into a project outside this
 * repository; the JSR import is pointed at this checkout with `links` (the one change a test needs
 * before the package is published); the function type-checks and runs with that config under
 * plain Deno against the test database, and the guide's SQL starts a run whose row is the one the
 * guide shows.
 */
import assert from "node:assert/strict";
import { testDatabase, waitFor } from "../support/db.ts";
import { assertSucceeded, deno, REPO_ROOT, spawnDeno } from "../package/deno_cmd.ts";
import { parseToml } from "../package/toml.ts";
import { blockNamed, codeBlocks } from "./markdown.ts";

const db = testDatabase(import.meta.url);
const guide = Deno.readTextFileSync(`${REPO_ROOT}docs/getting-started.md`);
const blocks = codeBlocks(guide);
const FN = "supabase/functions/greet";

/** The guide's project: its files, at the paths its code blocks name. */
async function writeProject(): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow_guide_" });
  await Deno.mkdir(`${dir}/${FN}`, { recursive: true });
  const config: Record<string, unknown> = JSON.parse(
    blockNamed(blocks, "json", `${FN}/deno.json`).code,
  );
  assert.deepEqual(config, { imports: { "@pgflow/shared": "jsr:@pgflow/shared@^0.1.0" } });
  // The test's override: resolve the published name to this checkout.
  const local = { ...config, links: [REPO_ROOT] };
  await Deno.writeTextFile(`${dir}/${FN}/deno.json`, JSON.stringify(local, null, 2));
  await Deno.writeTextFile(
    `${dir}/${FN}/index.ts`,
    blockNamed(blocks, "ts", `${FN}/index.ts`).code,
  );
  await Deno.writeTextFile(
    `${dir}/supabase/config.toml`,
    blockNamed(blocks, "toml", "supabase/config.toml").code,
  );
  return dir;
}

Deno.test("getting-started: the config.toml entry turns verify_jwt off and names the function's files", async () => {
  const dir = await writeProject();
  try {
    const table = parseToml(await Deno.readTextFile(`${dir}/supabase/config.toml`))
      .get("functions.greet");
    assert.ok(table !== undefined, "a [functions.greet] table");
    assert.equal(table.get("verify_jwt"), false);
    for (const key of ["import_map", "entrypoint"]) {
      // Paths in config.toml are relative to the supabase/ folder.
      await Deno.stat(`${dir}/supabase/${table.get(key)}`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

db.test("getting-started: the function runs with its own deno.json and the run completes as shown", async ({ sql, url }) => {
  const dir = await writeProject();
  const args = ["--no-lock", "--config", `${FN}/deno.json`, `${FN}/index.ts`];
  try {
    assertSucceeded("deno check", await deno(["check", ...args], { cwd: dir }));
    const child = spawnDeno(["run", "-A", ...args], { cwd: dir, env: { DATABASE_URL: url } });
    try {
      await waitFor(
        async () =>
          (await sql`select 1 from pgflow.workers where queue_name = 'greet_v1'`).length > 0,
        { what: `the guide's worker to register; output:\n${child.output()}`, timeoutMs: 60_000 },
      );
      await sql.unsafe(blockNamed(blocks, "sql", "start-run").code);
      const read = blockNamed(blocks, "sql", "read-run").code;
      const [row] = await waitFor(async () => {
        const rows = await sql.unsafe<{ status: string; output: unknown }[]>(read);
        return rows.length === 1 && rows[0].status !== "started" ? rows : undefined;
      }, { what: `the run to finish; output:\n${child.output()}` });
      // The row the guide prints under the query.
      const shown = /^\s*(\w+)\s*\|\s*(\{.*\})\s*$/m.exec(guide.slice(guide.indexOf(read)));
      assert.ok(shown !== null, "the guide shows the run's row");
      assert.deepEqual([row.status, row.output], [shown[1], JSON.parse(shown[2])]);
      child.process.kill("SIGTERM");
      assert.equal((await child.exited).code, 0, child.output());
    } finally {
      try {
        child.process.kill("SIGKILL");
      } catch {
        // Already exited.
      }
      await child.process.status;
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
