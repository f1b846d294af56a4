/**
 * Shared reads (docs/design.md, Claim): a worker that reads a message it cannot claim must not
 * keep it from a worker that can. read_and_claim hands such a message back when a live worker on
 * the queue serves its pair: visible again at once, however often it is read, announced on the
 * queue's channel with the pair; its task untouched. A message no live worker serves, or no task owns, keeps the visibility
 * the reader asked for. A worker whose own work waits behind another worker's backlog is told how
 * far (next_read_qty) and reads past it: a deeper read that claims at most its free slots.
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
  next_read_qty: number | null;
}

/**
 * One read_and_claim by `worker` against its registered set, without waiting in the database:
 * claiming at most `qty`, reading `readQty` when given.
 */
async function readAs(
  sql: postgres.Sql,
  queue: string,
  worker: string,
  vt = 30,
  qty = 10,
  readQty: number | null = null,
): Promise<ReadRow[]> {
  return await sql<ReadRow[]>`
    select msg_id::text, disposition, flow_slug, step_slug, read_ct, next_read_qty,
           extract(epoch from vt - clock_timestamp())::float8 as in_s
    from pgflow.read_and_claim(${queue}, ${worker}::uuid, ${vt}, ${qty}, 0, 50, null,
                               ${readQty}::integer)`;
}

/** Dispositions of `rows`, counted. */
function counts(rows: readonly ReadRow[]): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of rows) out[r.disposition] = (out[r.disposition] ?? 0) + 1;
  return out;
}

/** The queue's first `n` message ids are taken by messages no task owns (another sender's). */
async function foreign(sql: postgres.Sql, queue: string, n: number): Promise<void> {
  await sql`select count(*) from pgmq.send_batch(${queue},
              array(select '{"foreign": true}'::jsonb from generate_series(1, ${n})))`;
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

db.test("a message read again and again, queued long ago, is handed back at once every time: no read hides another live worker's message", async ({ sql }) => {
  await defineFlow(sql, "sr_e", [{ slug: "e", queue: "sr_q3" }], { mode: "routed" });
  await register(sql, "sr_q3", [["sr_e", "e"]]); // live, but busy: it never reads here
  const other = await register(sql, "sr_q3", [["sr_other", "x"]]);
  await sql`select pgflow.start_flow('sr_e', '{}')`;
  await sql`update pgflow.step_tasks set queued_at = now() - interval '1 minute'
            where flow_slug = 'sr_e'`;
  // Full reads (qty 1) that claim nothing, far more often than the queue has workers. Before
  // reads past a backlog, the third such read hid the message for half to a whole timeout.
  for (let i = 1; i <= 6; i++) {
    const [r] = await readAs(sql, "sr_q3", other, 30, 1);
    assert.equal(r.read_ct, i);
    assert.equal(r.disposition, "handed_back");
    assert.ok(r.in_s <= 0, `read ${i}: visible again at once (in ${r.in_s} s)`);
  }
});

db.test("a worker whose own work waits behind another's backlog is told how far, and a read that far claims at most qty, returns the rest (surplus), and leaves the backlog visible and untouched", async ({ sql, connect }) => {
  await defineFlow(sql, "sr_busy", [{ slug: "b", queue: "sr_past" }], { mode: "routed" });
  await defineFlow(sql, "sr_mine", [{ slug: "m", queue: "sr_past", timeout: 20 }], {
    mode: "routed",
  });
  await register(sql, "sr_past", [["sr_busy", "b"]]); // live, busy elsewhere: never reads here
  const me = await register(sql, "sr_past", [["sr_mine", "m"]]);
  const { heard, delivered } = await listen(connect, sql, "sr_past");
  const busy = await sql<{ run_id: string }[]>`
    select (pgflow.start_flow('sr_busy', '{}')).run_id from generate_series(1, 30)`;
  await sql`select pgflow.start_flow('sr_mine', '{}') from generate_series(1, 5)`;
  const [{ first }] = await sql<{ first: number }[]>`
    select min(msg_id)::int as first from pgmq.read('sr_past', 0, 1)`;
  await delivered();
  heard.length = 0;

  // Ten of the backlog's head, handed back; the first own task is 30 ids behind the first read.
  const head = await readAs(sql, "sr_past", me);
  assert.deepEqual(counts(head), { handed_back: 10 });
  assert.ok(head.every((r) => r.next_read_qty === 30 + 10), JSON.stringify(head[0]));
  assert.equal(Number(head[0].msg_id), first);
  await delivered();
  heard.length = 0;

  // Reading that far with two free slots: two claimed, three returned, thirty read past.
  const past = await readAs(sql, "sr_past", me, 30, 2, head[0].next_read_qty);
  assert.deepEqual(counts(past), { handed_back: 30, claimed: 2, surplus: 3 });
  for (const r of past) {
    if (r.disposition === "claimed") assert.ok(r.in_s > 20 && r.in_s <= 22.5, `claimed: ${r.in_s}`);
    else assert.ok(r.in_s <= 0, `${r.disposition} ${r.msg_id} visible again at once (${r.in_s})`);
  }
  // The claims are the first own tasks in message order; the read came back short (everything
  // visible was read), so the next read is told to reach the first surplus task.
  const mine = past.filter((r) => r.flow_slug === "sr_mine").map((r) => r.disposition);
  assert.deepEqual(mine, ["claimed", "claimed", "surplus", "surplus", "surplus"]);
  const firstSurplus = Number(past.find((r) => r.disposition === "surplus")!.msg_id);
  assert.ok(past.every((r) => r.next_read_qty === firstSurplus - first + 2));
  const tasks = await sql`select status, attempts_count from pgflow.step_tasks
                          where run_id = any (${busy.map((r) => r.run_id)}::uuid[])`;
  assert.ok(tasks.every((t) => t.status === "queued" && t.attempts_count === 0));
  await waitFor(() => heard.filter((h) => h !== "").length >= 2, { what: "the announcements" });
  // The queue holds more than a fair window ahead of its readers, so it is in window mode: the
  // read deeper than the window released the tasks parked for their turn first, announced with an
  // empty payload (docs/flow-control.md, "Fairness on a shared queue").
  assert.deepEqual(heard.filter((h) => h !== "").sort(), ['["sr_busy", "b"]', '["sr_mine", "m"]']);

  // complete_and_claim reads past the same way.
  const carried = await sql<{ disposition: string }[]>`
    select disposition from pgflow.complete_and_claim('{}', '{}', '{}', '{}', '{}', 'sr_past',
                                                      ${me}::uuid, 30, 3, null, 40)`;
  assert.deepEqual(carried.filter((r) => r.disposition === "claimed").length, 3);
});

db.test("next_read_qty is NULL when nothing of the worker's is queued within 2,000 ids behind its read, or the read saw every visible message; the distance counts ids, read or not", async ({ sql }) => {
  await defineFlow(sql, "sr_far", [{ slug: "f", queue: "sr_far_q" }], { mode: "routed" });
  const me = await register(sql, "sr_far_q", [["sr_far", "f"]]);
  // Another sender's 2,100 messages ahead of the worker's task: beyond reach.
  await foreign(sql, "sr_far_q", 2100);
  await sql`select pgflow.start_flow('sr_far', '{}')`;
  const far = await readAs(sql, "sr_far_q", me, 1);
  assert.deepEqual(counts(far), { unknown: 10 });
  assert.equal(far[0].next_read_qty, null);

  // 1,500 ahead: told to read 1,500 + 10 (the first read's ten ids count too, read or not).
  await defineFlow(sql, "sr_near", [{ slug: "n", queue: "sr_near_q" }], { mode: "routed" });
  const near = await register(sql, "sr_near_q", [["sr_near", "n"]]);
  await foreign(sql, "sr_near_q", 1500);
  await sql`select pgflow.start_flow('sr_near', '{}')`;
  const first = await readAs(sql, "sr_near_q", near);
  assert.equal(first[0].next_read_qty, 1510);
  // The foreign messages just read are hidden for the reader's 30 s now: the next read starts ten
  // ids further, and its distance is ten less.
  const second = await readAs(sql, "sr_near_q", near);
  assert.equal(second[0].next_read_qty, 1500);
  const past = await readAs(sql, "sr_near_q", near, 30, 10, 1500);
  assert.deepEqual(counts(past), { unknown: 1480, claimed: 1 });
  // A read past gives the messages no task owns the reader's visibility, as any read does.
  assert.ok(past.filter((r) => r.disposition === "unknown").every((r) => r.in_s > 25));

  // A read that came back short saw every visible message: nothing to read past.
  await foreign(sql, "sr_near_q", 5);
  await sql`select pgflow.start_flow('sr_near', '{}')`;
  const short = await readAs(sql, "sr_near_q", near, 30, 5, 20);
  assert.deepEqual(counts(short), { unknown: 5, claimed: 1 });
  assert.equal(short[0].next_read_qty, null);
});
