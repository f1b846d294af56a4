/**
 * The queue statistics refresh (supabase/schemas/0405_queue_statistics.sql) through PgBouncer in
 * transaction mode: a worker's read of a burst on a queue analysed while drained analyses the
 * queue inside its own transaction, as on a direct connection, and the reads after it are keyed.
 */
import assert from "node:assert/strict";
import postgres from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, registerWorker } from "../support/engine.ts";
import { bouncerFor } from "./harness.ts";

const db = testDatabase(import.meta.url);

db.test("through a transaction pooler, a slow read of a burst analyses the queue", async ({ sql, url }) => {
  const queue = "qsp_burst";
  await defineFlow(sql, "qsp_flow", [{ slug: "a", queue }], { mode: "routed" });
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[3000]))`;
  await sql.unsafe(`select count(*) from pgmq.archive('${queue}',
    array(select msg_id from pgmq.q_${queue}))`);
  await sql.unsafe(`analyze pgmq.q_${queue}`);
  const worker = await registerWorker(sql, queue);
  await sql`select count(*) from pgmq.send_batch(${queue}, array_fill('{}'::jsonb, array[30000]))`;
  await sql`select pg_sleep(1.1)`;
  const reltuples = async () =>
    Number(
      (await sql`select reltuples from pg_class
                      where oid = ${`pgmq.q_${queue}`}::regclass`)[0].reltuples,
    );
  assert.equal(await reltuples(), 0);

  const bouncer = await bouncerFor(url, "transaction");
  const pooled = postgres(bouncer.via(url), { max: 2, prepare: false, onnotice: () => {} });
  try {
    const read = () =>
      pooled`select msg_id from pgflow.read_and_claim(${queue}, ${worker}::uuid, 30, 10, 0)`;
    assert.equal((await read()).length, 10);
    assert.ok(await reltuples() > 20_000, `the queue's statistics count ${await reltuples()} rows`);
    assert.equal((await read()).length, 10);
  } finally {
    await pooled.end({ timeout: 5 });
    await bouncer.destroy();
  }
});
