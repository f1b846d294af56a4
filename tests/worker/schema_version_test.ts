/**
 * A worker checks the database's engine version before anything else at startup: no schema, a
 * schema without a version, an older one and a newer one each fail with a WorkerStartupError that
 * names both versions and the command to run, and leave the database as it was (no definition, no
 * worker row). The version the worker is built for is deno.json's.
 */
import assert from "node:assert/strict";
import { ENGINE_VERSION, Flow, type FlowWorker, WorkerStartupError } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";
import { databaseState } from "../cli/helpers.ts";
import { startWorker, stopAll } from "./helpers.ts";

const migrated = testDatabase(import.meta.url);
const empty = testDatabase(import.meta.url, { template: "empty" });

const flow = new Flow<{ n: number }>({ slug: "schema_check_v1" }).step(
  { slug: "a" },
  (input) => input.n,
);

async function startupError(url: string): Promise<WorkerStartupError> {
  const workers: FlowWorker[] = [];
  try {
    await startWorker(workers, flow, { connectionString: url });
  } catch (error) {
    assert.ok(error instanceof WorkerStartupError, String(error));
    return error;
  } finally {
    await stopAll(workers);
  }
  throw new Error("the worker started");
}

const INSTALL = `deno run -A jsr:@pgflow/shared@${ENGINE_VERSION}/cli install`;
const MIGRATE = `deno run -A jsr:@pgflow/shared@${ENGINE_VERSION}/cli migrate --database-url <url>`;

Deno.test("the worker is built for deno.json's version", () => {
  const config = JSON.parse(Deno.readTextFileSync(new URL("../../deno.json", import.meta.url)));
  assert.equal(ENGINE_VERSION, config.version);
});

migrated.test("the migrated database records this worker's version", async ({ sql }) => {
  const [{ version }] = await sql`select pgflow.engine_version() as version`;
  assert.equal(version, ENGINE_VERSION);
});

empty.test("no pgflow schema: apply the migrations (both commands named)", async ({ url }) => {
  const before = await databaseState(url);
  const error = await startupError(url);
  assert.match(error.message, /worker cannot start: this database has no pgflow schema/);
  assert.ok(error.message.includes(`(database: none; this code: engine ${ENGINE_VERSION})`));
  assert.ok(error.message.includes(`\`${INSTALL}\` then \`supabase db push\``), error.message);
  assert.ok(error.message.includes(MIGRATE), error.message);
  assert.deepEqual(await databaseState(url), before, "nothing changed");
});

for (
  const [what, sqlText, pattern] of [
    [
      "a schema without a version",
      "drop function pgflow.engine_version()",
      /records no engine version \(database: older than 0\.1\.0 or half-applied; this code: engine /,
    ],
    [
      "an older schema",
      "create or replace function pgflow.engine_version() returns text language sql as $$ select '0.0.9' $$",
      /schema is engine 0\.0\.9, older than this code's engine \S+\. Apply the migrations of/,
    ],
    [
      "a newer schema",
      "create or replace function pgflow.engine_version() returns text language sql as $$ select '99.0.0' $$",
      /schema is engine 99\.0\.0, newer than this code's engine \S+\. Deploy workers built with @pgflow\/shared 99\.0\.0 \(import jsr:@pgflow\/shared@99\.0\.0\)/,
    ],
  ] as const
) {
  migrated.test(
    `${what} fails startup naming both versions, and changes nothing`,
    async ({ sql, url }) => {
      await sql.unsafe(sqlText);
      const before = await databaseState(url);
      const error = await startupError(url);
      assert.match(error.message, pattern);
      assert.ok(error.message.includes(ENGINE_VERSION));
      if (what !== "a newer schema") {
        assert.ok(
          error.message.includes(INSTALL) && error.message.includes(MIGRATE),
          error.message,
        );
      }
      assert.deepEqual(await databaseState(url), before);
      const [{ flows, workers }] = await sql`
      select (select count(*)::int from pgflow.flows where flow_slug = 'schema_check_v1') as flows,
             (select count(*)::int from pgflow.workers) as workers`;
      assert.deepEqual([flows, workers], [0, 0], "nothing compiled, nothing registered");
    },
    { fresh: true },
  );
}
