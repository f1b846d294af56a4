/**
 * A worker whose steps share one timeout reads with that timeout + 2 s (its registered
 * claim_visibility), so the messages it claims need no pgmq.set_vt; the ones it does not claim
 * are set back to its visibility timeout. The hint is checked at every claim: steps with
 * different timeouts, or a timeout changed since registration, still end with timeout + 2 s.
 * set_vt calls are counted with the transaction's function statistics (track_functions).
 */
import assert from "node:assert/strict";
import type { Sql } from "postgres";
import { testDatabase } from "../support/db.ts";
import { defineFlow, queueMessages } from "../support/engine.ts";

const db = testDatabase(import.meta.url);

interface Claimed {
  disposition: string;
  msg_id: string;
  vt: Date;
}

/** One read_and_claim against the registered set; returns its rows and its pgmq.set_vt calls. */
async function claimCountingSetVt(
  sql: Sql,
  queue: string,
  worker: string,
): Promise<{ rows: Claimed[]; setVtCalls: number }> {
  return await sql.begin(async (tx) => {
    await tx`set local track_functions = 'all'`;
    const calls = async () => {
      const [row] = await tx<{ n: number }[]>`
        select coalesce(sum(calls), 0)::int as n from pg_stat_xact_user_functions
        where schemaname = 'pgmq' and funcname = 'set_vt'`;
      return row.n;
    };
    const before = await calls();
    const rows = await tx<Claimed[]>`
      select disposition, msg_id::text as msg_id, vt
      from pgflow.read_and_claim(${queue}, ${worker}::uuid, 7, 10, 0)`;
    return { rows, setVtCalls: (await calls()) - before };
  }) as { rows: Claimed[]; setVtCalls: number };
}

async function register(sql: Sql, queue: string, pairs: [string, string][]): Promise<string> {
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, ${queue}, 'test_fn', ${
    JSON.stringify(pairs)
  }::text::jsonb)`;
  return worker;
}

/** Seconds until each message of `queue` is visible again, by message id. */
async function visibleIn(sql: Sql, queue: string): Promise<Map<string, number>> {
  return new Map((await queueMessages(sql, queue)).map((m) => [String(m.msg_id), m.vt_in_seconds]));
}

db.test("steps sharing a timeout: claimed without set_vt, the rest set back to the worker's visibility", async ({ sql }) => {
  await defineFlow(sql, "cv_one", [{ slug: "a", queue: "cv_q", timeout: 20 }], { mode: "routed" });
  const worker = await register(sql, "cv_q", [["cv_one", "a"]]);
  const [{ claim_visibility }] = await sql`
    select claim_visibility from pgflow.workers where worker_id = ${worker}::uuid`;
  assert.equal(claim_visibility, 22);
  await sql`select pgflow.start_flow('cv_one', '{}'::jsonb) from generate_series(1, 3)`;
  // A message no task owns, which the worker does not claim.
  await sql`select pgmq.send('cv_q', '{"other": true}'::jsonb)`;

  const { rows, setVtCalls } = await claimCountingSetVt(sql, "cv_q", worker);
  const claimed = rows.filter((r) => r.disposition === "claimed");
  const other = rows.filter((r) => r.disposition !== "claimed");
  assert.deepEqual([claimed.length, other.length], [3, 1]);
  // Only the message not claimed was set: back to 7 s.
  assert.equal(setVtCalls, 1);
  const vis = await visibleIn(sql, "cv_q");
  for (const r of claimed) {
    const s = vis.get(r.msg_id)!;
    assert.ok(s > 20 && s <= 22.5, `claimed message ${r.msg_id} visible in ${s}s`);
  }
  for (const r of other) {
    const s = vis.get(r.msg_id)!;
    assert.ok(s > 5 && s <= 7.5, `unclaimed message ${r.msg_id} visible in ${s}s`);
  }
  // Each row says the visibility its message ended with.
  const [{ now }] = await sql<{ now: Date }[]>`select clock_timestamp() as now`;
  for (const r of rows) {
    const s = (r.vt.getTime() - now.getTime()) / 1000;
    assert.ok(Math.abs(s - vis.get(r.msg_id)!) < 0.5, `row vt of ${r.msg_id}: ${s}s`);
  }
});

db.test("steps with different timeouts, or a timeout changed since registration: set_vt as before", async ({ sql }) => {
  await defineFlow(sql, "cv_two", [
    { slug: "a", queue: "cv_q2", timeout: 20 },
    { slug: "b", queue: "cv_q2", timeout: 40 },
  ], { mode: "routed" });
  const both = await register(sql, "cv_q2", [["cv_two", "a"], ["cv_two", "b"]]);
  const [{ claim_visibility }] = await sql`
    select claim_visibility from pgflow.workers where worker_id = ${both}::uuid`;
  assert.equal(claim_visibility, null);
  await sql`select pgflow.start_flow('cv_two', '{}'::jsonb)`;
  const first = await claimCountingSetVt(sql, "cv_q2", both);
  assert.equal(first.rows.filter((r) => r.disposition === "claimed").length, 2);
  assert.equal(first.setVtCalls, 2);
  const vis = [...(await visibleIn(sql, "cv_q2")).values()].sort((x, y) => x - y);
  assert.ok(vis[0] > 20 && vis[0] <= 22.5 && vis[1] > 40 && vis[1] <= 42.5, String(vis));

  // Registered while step a's timeout was 20 s; it is 30 s now: the hint is wrong and not used.
  await defineFlow(sql, "cv_changed", [{ slug: "a", queue: "cv_q3", timeout: 20 }], {
    mode: "routed",
  });
  const stale = await register(sql, "cv_q3", [["cv_changed", "a"]]);
  await sql`update pgflow.steps set opt_timeout = 30 where flow_slug = 'cv_changed'`;
  await sql`select pgflow.start_flow('cv_changed', '{}'::jsonb)`;
  const second = await claimCountingSetVt(sql, "cv_q3", stale);
  assert.deepEqual(second.rows.map((r) => r.disposition), ["claimed"]);
  assert.equal(second.setVtCalls, 1);
  const [s] = (await visibleIn(sql, "cv_q3")).values();
  assert.ok(s > 30 && s <= 32.5, `claimed message visible in ${s}s`);
});
