/**
 * The throw-away Postgres launcher: both sources of server binaries start a server that accepts
 * connections (as root it runs as an unprivileged user), survives a stop/start, and is removed;
 * the server and a PgBouncer in front of it never outlive the process that started them.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { waitFor } from "./db.ts";
import { isRunning } from "./processes.ts";

function hasSystemPostgres(): boolean {
  try {
    return Deno.statSync("/usr/lib/postgresql").isDirectory;
  } catch {
    return false;
  }
}

for (const source of ["system", "npm"] as const) {
  Deno.test({
    name: `a ${source} server starts, restarts and is destroyed`,
    // The machine's binaries are optional; the npm-packaged server is the fallback everywhere.
    ignore: source === "system" && !hasSystemPostgres(),
    async fn() {
      const previous = Deno.env.get("PGFLOW_PG_SOURCE");
      Deno.env.set("PGFLOW_PG_SOURCE", source);
      const pg = await startLocalPostgres().finally(() =>
        previous === undefined
          ? Deno.env.delete("PGFLOW_PG_SOURCE")
          : Deno.env.set("PGFLOW_PG_SOURCE", previous)
      );
      try {
        const query = async () => {
          const sql = postgres(pg.url, { max: 1, onnotice: () => {} });
          try {
            const [row] = await sql<{ user: string; v: string }[]>`
              select current_user as user, current_setting('server_version_num') as v`;
            return row;
          } finally {
            await sql.end();
          }
        };
        const row = await query();
        assert.equal(row.user, "postgres");
        assert.ok(Number(row.v) >= 150000);
        await pg.stop();
        await pg.start();
        assert.equal((await query()).user, "postgres");
      } finally {
        await pg.destroy();
      }
      assert.throws(() => Deno.statSync(pg.dataDir), /No such file/);
    },
  });
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

async function listening(port: number): Promise<boolean> {
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port })).close();
    return true;
  } catch {
    return false;
  }
}

Deno.test("servers do not outlive a starter killed with SIGKILL", async () => {
  const notes = await Deno.makeTempFile({ prefix: "pgflow-watchdog-log-" });
  const starter = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("./fixtures/start_servers.ts", import.meta.url).pathname],
    // The notes go to this test's file: the test runner counts notes in its own as leaks.
    env: { NO_COLOR: "1", PGFLOW_WATCHDOG_LOG: notes },
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(starter.stderr).text();
  const lines = starter.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let out = "";
  try {
    while (!out.includes("\n")) {
      const { value, done } = await lines.read();
      if (done) throw new Error(`the starter ended before its servers were up:\n${await stderr}`);
      out += value;
    }
  } finally {
    starter.kill("SIGKILL");
    await starter.status;
    await lines.cancel();
  }
  const s = JSON.parse(out) as {
    port: number;
    dataDir: string;
    postmasterPid: number;
    bouncerPort: number;
  };
  assert.ok(await listening(s.port), "the server was up when its starter died");
  try {
    // A watchdog writes its note last, once its server is gone and its folder removed: a closed
    // port only says the kill happened, not that the watchdog is done.
    const stoppedBoth = (note: string) =>
      /ended without stopping the throw-away Postgres in .*: stopped it/.test(note) &&
      /ended without stopping the throw-away PgBouncer in .*: stopped it/.test(note);
    // A watchdog gives up after about 25 s (its stop command's tries, then SIGKILL).
    await waitFor(async () => stoppedBoth(await Deno.readTextFile(notes)), {
      timeoutMs: 60_000,
      what: `both watchdogs' notes that they stopped the orphaned servers (${JSON.stringify(s)})`,
    });
    assert.ok(!isRunning(s.postmasterPid), "the postmaster is gone");
    assert.ok(!exists(s.dataDir), "the server's folder is removed");
    assert.ok(!(await listening(s.port)), "nothing listens on the server's port");
    assert.ok(!(await listening(s.bouncerPort)), "nothing listens on PgBouncer's port");
  } finally {
    await Deno.remove(notes);
    await stderr;
  }
});
