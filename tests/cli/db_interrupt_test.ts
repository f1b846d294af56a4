/**
 * A `pgflow db start` interrupted while it creates the database (Ctrl-C to its process group,
 * SIGTERM or SIGKILL to it, mid-initdb or just after) leaves a folder the next start recognises:
 * it finishes the creation when initdb had finished, else removes what was left (while an orphaned
 * initdb may still be writing in it) and creates the database again. `db status` says so meanwhile.
 */
import assert from "node:assert/strict";
import { freePort } from "../e2e/process.ts";
import { waitFor } from "../support/db.ts";
import { projectDir, query, runCli, shown } from "./helpers.ts";

const MAIN = new URL("../../src/cli/main.ts", import.meta.url).href;

const exists = (path: string) => Deno.lstat(path).then(() => true, () => false);

/** Waits (long: initdb on a busy machine) until `check` holds. */
const until = (what: string, check: () => Promise<boolean>) =>
  waitFor(check, { what, timeoutMs: 90_000, intervalMs: 20 });

/** `pgflow db start` in a process group of its own (as a terminal runs it), not awaited. */
function spawnStart(dir: string, port: string, env: Record<string, string> = {}) {
  const inherited: Record<string, string> = {};
  for (const [k, v] of Object.entries(Deno.env.toObject())) {
    if (k !== "DATABASE_URL" && k !== "EDGE_WORKER_DB_URL") inherited[k] = v;
  }
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--no-lock", MAIN, "db", "start", "--data-dir", dir, "--port", port],
    env: { ...inherited, NO_COLOR: "1", ...env },
    clearEnv: true,
    stdout: "null",
    stderr: "piped",
    detached: true,
  }).spawn();
  const stderr = new Response(child.stderr).text();
  return { child, stderr };
}

/** Whether initdb has begun filling a folder of `dir` (its first file is written early). */
async function initdbRunning(dir: string): Promise<boolean> {
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (entry.isDirectory && await exists(`${dir}/${entry.name}/PG_VERSION`)) return true;
    }
  } catch {
    // Not made yet.
  }
  return false;
}

/** The processes whose command line names `dir` (an orphaned initdb and its backend). */
async function processesOf(dir: string): Promise<string[]> {
  const found: string[] = [];
  for await (const entry of Deno.readDir("/proc")) {
    if (!/^\d+$/.test(entry.name) || Number(entry.name) === Deno.pid) continue;
    const cmdline = await Deno.readTextFile(`/proc/${entry.name}/cmdline`).catch(() => "");
    if (cmdline.includes(dir)) found.push(`${entry.name}: ${cmdline.replaceAll("\0", " ")}`);
  }
  return found;
}

async function listing(dir: string): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(dir)) names.push(entry.name);
  return names.sort();
}

for (
  const [how, signal, group] of [
    ["Ctrl-C (SIGINT to the process group)", "SIGINT", true],
    ["SIGTERM", "SIGTERM", false],
    ["SIGKILL (initdb goes on, orphaned)", "SIGKILL", false],
  ] as const
) {
  Deno.test(`db start interrupted by ${how} during initdb: the next start creates the database`, async () => {
    const project = await projectDir("pgflow-db-interrupt-");
    const dir = `${project}/db`;
    const cli = (args: string[]) => runCli(["db", ...args, "--data-dir", dir], { cwd: project });
    try {
      const port = String(freePort());
      const { child, stderr } = spawnStart(dir, port);
      await until("initdb at work", () => initdbRunning(dir));
      Deno.kill(group ? -child.pid : child.pid, signal);
      const { success } = await child.status;
      await stderr;
      assert.equal(success, false, "the start was interrupted");
      assert.equal(await exists(`${dir}/pgflow-db.json`), false, "it had not finished");

      const status = await cli(["status"]);
      assert.equal(status.code, 1, shown(status));
      assert.match(status.stdout, /^state\s+no database$/m, shown(status));
      assert.match(status.stderr, /a db start was interrupted while creating it/, shown(status));

      const again = await cli(["start", "--port", port]);
      assert.equal(again.code, 0, shown(again));
      assert.match(again.stderr, /removed what an interrupted db start left in /, shown(again));
      assert.match(again.stderr, /creating a database in /, shown(again));
      const url = again.stdout.trim();
      assert.equal(url, `postgres://postgres@127.0.0.1:${port}/postgres`);
      const [{ ok }] = await query(url, (sql) => sql`select pgflow.is_local_development() as ok`);
      assert.equal(ok, true, "set up: PGMQ, the migrations, local development mode");
      await until(
        "no process of the interrupted start",
        async () => (await processesOf(`${dir}/data.new-`)).length === 0,
      );
      assert.deepEqual(await listing(dir), [".gitignore", "data", "pgflow-db.json", "server.log"]);
    } finally {
      await cli(["stop"]);
      await Deno.remove(project, { recursive: true });
    }
  });
}

Deno.test("db start killed after initdb finished: the next start records the database it made", async () => {
  const project = await projectDir("pgflow-db-interrupt-");
  const dir = `${project}/db`;
  const cli = (args: string[]) => runCli(["db", ...args, "--data-dir", dir], { cwd: project });
  try {
    const port = String(freePort());
    const { child, stderr } = spawnStart(dir, port, { PGFLOW_DB_TEST_PAUSE: "record:600000" });
    await until("initdb done", () => exists(`${dir}/data/PG_VERSION`));
    child.kill("SIGKILL");
    await child.status;
    await stderr;
    assert.deepEqual(await listing(dir), [".gitignore", "data", "pgflow-db.creating"]);

    const again = await cli(["start"]);
    assert.equal(again.code, 0, shown(again));
    assert.match(again.stderr, /an interrupted db start had created the database in .*: recorded/);
    assert.doesNotMatch(again.stderr, /creating a database/, "no second initdb");
    assert.equal(again.stdout.trim(), `postgres://postgres@127.0.0.1:${port}/postgres`);
    assert.deepEqual(await listing(dir), [".gitignore", "data", "pgflow-db.json", "server.log"]);
  } finally {
    await cli(["stop"]);
    await Deno.remove(project, { recursive: true });
  }
});

Deno.test("an interrupted start's folder that also holds someone else's file is left untouched", async () => {
  const project = await projectDir("pgflow-db-interrupt-");
  const dir = `${project}/db`;
  try {
    await Deno.mkdir(`${dir}/data.new-1a2b3c4d`, { recursive: true });
    await Deno.writeTextFile(`${dir}/pgflow-db.creating`, "{}\n");
    await Deno.writeTextFile(`${dir}/notes.txt`, "mine\n");
    const r = await runCli(["db", "start", "--data-dir", dir], { cwd: project });
    assert.equal(r.code, 1, shown(r));
    assert.match(
      r.stderr,
      /holds what an interrupted db start left, and notes\.txt, which pgflow did not make there; nothing was changed/,
    );
    assert.deepEqual(await listing(dir), ["data.new-1a2b3c4d", "notes.txt", "pgflow-db.creating"]);
  } finally {
    await Deno.remove(project, { recursive: true });
  }
});
