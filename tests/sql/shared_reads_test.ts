/**
 * Shared reads (DESIGN §4): a worker that reads a message it cannot claim must not keep it from a
 * worker that can. read_and_claim hands such a message back when a live worker on the queue serves
 * its pair: visible again at once on its first reads (later hidden for a random half to whole
 * visibility timeout), announced on the queue's channel with the pair; its task untouched. A
 * message no live worker serves, or no task owns, keeps the visibility the reader asked for.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { testDatabase, waitFor } from "../support/db.ts";
import { allNotified, defineFlow, waitForNotifications } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface ReadRow {
  msg_id: string;
  disposition: string;
  flow_slug: string | null;
  step_slug: string | null;
  /** Seconds from now until the message is visible again (negative: visible). */
  in_s: number;
  read_ct: number;
}

/** One read_and_claim by `worker` against its registered set, without waiting in the database. */
async function readAs(
  sql: postgres.Sql,
  queue: string,
  worker: string,
  vt = 30,
  qty = 10,
): Promise<ReadRow[]> {
  return await sql<ReadRow[]>`
    select msg_id::text, disposition, flow_slug, step_slug, read_ct,
           extract(epoch from vt - clock_timestamp())::float8 as in_s
    from pgflow.read_and_claim(${queue}, ${worker}::uuid, ${vt}, ${qty}, 0)`;
}

async function register(sql: postgres.Sql, queue: string, pairs: [string, string][]) {
  const id = crypto.randomUUID();
  await sql`select pgflow.register_worker(${id}::uuid, ${queue}, 'fn_sr', ${sql.json(pairs)})`;
  return id;
}

async function task(sql: postgres.Sql, runId: string) {
  const [row] = await sql`select status, attempts_count from pgflow.step_tasks
                          where run_id = ${runId}::uuid`;
  return { ...row };
}

/**
 * Notifications on the queue's channel, with their payloads; `delivered()` returns once every one
 * committed before it has been heard.
 */
async function listen(
  connect: () => postgres.Sql,
  sql: postgres.Sql,
  queue: string,
): Promise<{ heard: string[]; delivered: () => Promise<void> }> {
  const heard: string[] = [];
  const conn = connect();
  await conn.listen(`pgflow_queue:${queue}`, (payload) => heard.push(payload));
  await waitForNotifications(conn, [`pgflow_queue:${queue}`]);
  return { heard, delivered: () => allNotified(conn, sql) };
}

db.test("a message another live worker serves is handed back: visible at once, announced with its pair, its task untouched", async ({ sql, connect }) => {
  await defineFlow(sql, "sr_a", [{ slug: "a", queue: "sr_q" }], { mode: "routed" });
  await defineFlow(sql, "sr_b", [{ slug: "b", queue: "sr_q" }], { mode: "routed" });
  const serving = await register(sql, "sr_q", [["sr_a", "a"]]);
  const other = await register(sql, "sr_q", [["sr_b", "b"]]);
  const { heard, delivered } = await listen(connect, sql, "sr_q");
  const [{ run_id: runId }] = await sql`select run_id from pgflow.start_flow('sr_a', '{}')`;
  await delivered();
  heard.length = 0;

  const [read] = await readAs(sql, "sr_q", other);
  assert.equal(read.disposition, "handed_back");
  assert.deepEqual([read.flow_slug, read.step_slug], ["sr_a", "a"]);
  assert.ok(read.in_s <= 0, `visible again at once (in ${read.in_s} s)`);
  assert.deepEqual(await task(sql, runId), { status: "queued", attempts_count: 0 });
  await delivered();
  assert.deepEqual(heard, ['["sr_a", "a"]'], "announced with its pair, never its body");

  const [claimed] = await readAs(sql, "sr_q", serving);
  assert.equal(claimed.disposition, "claimed", "the worker that serves it reads it now");
});

db.test("no live worker serves it, or no task owns it: the message keeps the reader's visibility, unannounced", async ({ sql, connect }) => {
  await defineFlow(sql, "sr_c", [{ slug: "c", queue: "sr_q2" }], { mode: "routed" });
  await defineFlow(sql, "sr_d", [{ slug: "d", queue: "sr_q2" }], { mode: "routed" });
  const other = await register(sql, "sr_q2", [["sr_d", "d"]]);
  // Workers that serve sr_c but are not live: stopped, deprecated, silent for a minute.
  const stopped = await register(sql, "sr_q2", [["sr_c", "c"]]);
  await sql`select pgflow.mark_worker_stopped(${stopped}::uuid)`;
  const deprecated = await register(sql, "sr_q2", [["sr_c", "c"]]);
  await sql`update pgflow.workers set deprecated_at = now() where worker_id = ${deprecated}::uuid`;
  const silent = await register(sql, "sr_q2", [["sr_c", "c"]]);
  await sql`update pgflow.workers set last_heartbeat_at = now() - interval '1 minute'
            where worker_id = ${silent}::uuid`;
  // Serving sr_c, but on another queue.
  await register(sql, "sr_elsewhere", [["sr_c", "c"]]);
  const { heard, delivered } = await listen(connect, sql, "sr_q2");
  await sql`select pgflow.start_flow('sr_c', '{}')`;
  await sql`select pgmq.send('sr_q2', '{"foreign": true}')`;
  await delivered();
  heard.length = 0;

  const rows = await readAs(sql, "sr_q2", other, 30);
  assert.deepEqual(rows.map((r) => r.disposition).sort(), ["unknown", "unsupported"]);
  for (const r of rows) assert.ok(r.in_s > 25, `${r.disposition}: hidden for the reader's 30 s`);
  await delivered();
  assert.deepEqual(heard, [], "nothing announced");
});

db.test("a message handed back as often as the queue has live workers (at least twice), queued over half a timeout ago and not taken, is hidden from a full read that claimed nothing for half to a whole timeout, announced with when it reappears", async ({ sql, connect }) => {
  await defineFlow(sql, "sr_e", [{ slug: "e", queue: "sr_q3" }], { mode: "routed" });
  await register(sql, "sr_q3", [["sr_e", "e"]]); // live, but busy: it never reads here
  const other = await register(sql, "sr_q3", [["sr_other", "x"]]);
  const { heard, delivered } = await listen(connect, sql, "sr_q3");
  await sql`select pgflow.start_flow('sr_e', '{}')`;
  // Two live workers on the queue: handed back at once on reads 1 and 2.
  for (let i = 1; i <= 2; i++) {
    const [r] = await readAs(sql, "sr_q3", other, 30, 1);
    assert.equal(r.read_ct, i);
    assert.equal(r.disposition, "handed_back");
    assert.ok(r.in_s <= 0, `read ${i}: visible again at once`);
  }
  // Read often, but queued only just now (its workers may be about to read it): still at once.
  const [young] = await readAs(sql, "sr_q3", other, 30, 1);
  assert.equal(young.disposition, "handed_back");
  assert.ok(young.in_s <= 0);
  // Queued a minute ago, more than half the 30 s timeout: its workers are busy.
  await sql`update pgflow.step_tasks set queued_at = now() - interval '1 minute'
            where flow_slug = 'sr_e'`;
  await delivered();
  heard.length = 0;
  // A read that was not full (nothing can wait behind the message) still hands it back at once.
  const [notFull] = await readAs(sql, "sr_q3", other, 30, 10);
  assert.equal(notFull.disposition, "handed_back");
  assert.ok(notFull.in_s <= 0);
  await delivered();
  heard.length = 0;
  // A full read that claimed nothing hides it.
  const [fifth] = await readAs(sql, "sr_q3", other, 30, 1);
  assert.equal(fifth.disposition, "handed_back_later");
  assert.ok(fifth.in_s > 14 && fifth.in_s <= 30, `hidden for 15-30 s, got ${fifth.in_s}`);
  await waitFor(() => heard.length > 0, { what: "the announcement" });
  const [flow, step, ms] = JSON.parse(heard[0]);
  assert.deepEqual([flow, step], ["sr_e", "e"]);
  assert.ok(Math.abs(ms / 1000 - fifth.in_s) < 2, `announced as visible in ${ms} ms`);
  assert.equal((await readAs(sql, "sr_q3", other)).length, 0, "and hidden from this reader too");
});
