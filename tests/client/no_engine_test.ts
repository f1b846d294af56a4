/**
 * A client against a database where the engine was never installed says so and names the command
 * that installs it, instead of Postgres's `schema "pgflow" does not exist`.
 */
import assert from "node:assert/strict";
import { createClient, Flow } from "../../mod.ts";
import { testDatabase } from "../support/db.ts";

const db = testDatabase(import.meta.url, { template: "empty" });

const flow = new Flow<{ n: number }>({ slug: "ne_flow" }).step({ slug: "a" }, (i) => i.n);

db.test("startFlow and getRun on a database without the engine name the install command", async ({ url }) => {
  const client = createClient({ connectionString: url, transport: "poll" });
  try {
    for (
      const [what, call] of [
        ["startFlow", () => client.startFlow(flow, { n: 1 })],
        ["getRun", () => client.getRun(crypto.randomUUID())],
      ] as const
    ) {
      const error = await (call as () => Promise<unknown>)().then(
        () => assert.fail(`${what} resolved`),
        (e: Error) => e,
      );
      assert.match(error.message, /this database has no pgflow schema/, what);
      assert.match(error.message, /cli migrate --database-url <url>/, what);
      assert.match(error.message, /supabase db push/, what);
    }
  } finally {
    await client.close();
  }
});
