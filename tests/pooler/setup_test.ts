/**
 * The pooler tests' own set-up: a scenario with a Postgres of its own leaves nothing running when
 * PgBouncer cannot start (on a machine without PgBouncer that Postgres once ran for hours).
 */
import assert from "node:assert/strict";
import type { LocalPostgres } from "../../src/cli/db/launcher.ts";
import { withOwnServerBehindBouncer } from "./harness.ts";

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

Deno.test("a PgBouncer that cannot start leaves no Postgres running", async () => {
  let pg: LocalPostgres | undefined;
  let ran = false;
  await assert.rejects(
    () =>
      withOwnServerBehindBouncer(() => Promise.resolve(ran = true), {
        bouncerBinary: "/bin/false",
        onPostgres: (started) => pg = started,
      }),
    /PgBouncer did not start/,
  );
  assert.equal(ran, false);
  assert.ok(pg, "the Postgres was started first");
  assert.equal(exists(pg.dataDir), false, `${pg.dataDir} was removed`);
  await assert.rejects(
    () => Deno.connect({ hostname: "127.0.0.1", port: pg!.port }),
    /refused/i,
    `nothing listens on ${pg.port}`,
  );
});
