/**
 * The README's install section runs as written, in a new folder outside this repository, as a new
 * user would follow it: its `sh install` block (with `PGFLOW_CHECKOUT` set to this checkout, the one
 * thing a user fills in), its `worker.ts`, and its SQL, whose run ends as the README's comment
 * says. The hints the CLI printed on the way name no path of this machine.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { waitFor } from "../support/db.ts";
import { REPO_ROOT } from "../package/deno_cmd.ts";
import { codeBlocks } from "./markdown.ts";

const readme = Deno.readTextFileSync(`${REPO_ROOT}README.md`);
const section = readme.slice(
  readme.indexOf("## Install"),
  readme.indexOf("\n## ", readme.indexOf("## Install") + 1),
);
const blocks = codeBlocks(section);

/** The block of `lang` whose info string is `lang attr` (attr may be empty): exactly one. */
function only(lang: string, attr = ""): string {
  const found = blocks.filter((b) => b.lang === lang && b.attrs.join(" ") === attr);
  assert.equal(found.length, 1, `one \`\`\`${lang} ${attr} block in the install section`);
  return found[0].code;
}

Deno.test("README install: init, db start and the worker, from a folder outside the repository", async () => {
  const commands = only("sh", "install").trim().split("\n");
  assert.equal(commands.length, 3, `three commands: ${commands}`);
  const [lastCommand] = commands.slice(-1);
  assert.match(lastCommand, /^deno run -A worker\.ts\b/);
  // The user's project: not under this checkout, readable by the server's user (db start runs
  // Postgres as postgres when run as root).
  const project = await Deno.makeTempDir({ prefix: "pgflow-readme-" });
  await Deno.chmod(project, 0o755);
  await Deno.writeTextFile(`${project}/worker.ts`, only("ts"));
  const env = {
    PGFLOW_CHECKOUT: REPO_ROOT.replace(/\/$/, ""),
    PATH: `${Deno.execPath().replace(/\/[^/]*$/, "")}:${Deno.env.get("PATH") ?? ""}`,
    NO_COLOR: "1",
  };
  // The last command runs for ever: exec'd, so stopping the shell stops the worker.
  const script = [...commands.slice(0, -1), `exec ${lastCommand}`].join("\n");
  const shell = new Deno.Command("bash", {
    args: ["-euc", script],
    cwd: project,
    env,
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let output = "";
  const decoder = new TextDecoder();
  const drained = Promise.all([shell.stdout, shell.stderr].map(async (stream) => {
    for await (const chunk of stream) output += decoder.decode(chunk, { stream: true });
  }));
  const cli = (...args: string[]) =>
    new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "jsr:@pgflow/shared/cli", ...args],
      cwd: project,
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
  let sql: postgres.Sql | undefined;
  try {
    const config = JSON.parse(
      await waitFor(
        () => Deno.readTextFile(`${project}/deno.json`).catch(() => undefined),
        { what: `init to write deno.json; output:\n${output}`, timeoutMs: 60_000 },
      ),
    );
    assert.equal(config.imports["@pgflow/shared"], "jsr:@pgflow/shared@^0.1.0");
    const url = await waitFor(async () => {
      const run = await cli("db", "url");
      return run.code === 0 ? new TextDecoder().decode(run.stdout).trim() : undefined;
    }, { what: `db start; output:\n${output}`, timeoutMs: 120_000, intervalMs: 500 });
    sql = postgres(url, { max: 1, onnotice: () => {} });
    const db = sql;
    // db url answers once the port is chosen; the server may still be starting, the schema and
    // the worker still coming.
    await waitFor(
      () =>
        db`select 1 from pgflow.workers where queue_name = 'greet_v1'`.then(
          (rows) => rows.length > 0,
          () => false,
        ),
      { what: `the README's worker to register; output:\n${output}`, timeoutMs: 90_000 },
    );
    const [start, read] = only("sql").trim().split("\n");
    await sql.unsafe(start);
    const shownRow = /--\s*(\w+)\s*\|\s*(\{.*\})\s*$/.exec(read);
    assert.ok(shownRow !== null, `the README shows the run's row: ${read}`);
    const [row] = await waitFor(async () => {
      const rows = await db.unsafe<{ status: string; output: unknown }[]>(read);
      return rows.length === 1 && rows[0].status !== "started" ? rows : undefined;
    }, { what: `the run to finish; output:\n${output}`, timeoutMs: 60_000 });
    assert.deepEqual([row.status, row.output], [shownRow[1], JSON.parse(shownRow[2])]);
    // What the CLI printed for the user (db start's "stop with …") is a command for any machine.
    assert.match(output, /stop with `deno run -A jsr:@pgflow\/shared@[\d.]+\/cli db stop`/);
    assert.ok(!output.includes(REPO_ROOT), `no path of this checkout in:\n${output}`);
  } finally {
    await sql?.end();
    try {
      shell.kill("SIGTERM");
    } catch {
      // Exited already.
    }
    await shell.status;
    await drained;
    const stop = await cli("db", "stop");
    assert.equal(stop.code, 0, new TextDecoder().decode(stop.stderr));
    await Deno.remove(project, { recursive: true });
  }
});
