/**
 * The throw-away Postgres launcher: both sources of server binaries start a server that accepts
 * connections (as root it runs as an unprivileged user), survives a stop/start, and is removed.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";

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
