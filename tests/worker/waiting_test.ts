/**
 * Waiting steps with real workers (docs/waiting.md): a durable sleep wakes on the workers' tick,
 * never early, across a restart of every worker; 10,000 waiting runs cost an idle worker's poll
 * nothing (no tuple of step_states read while it runs); and an approval flow where 1,000 runs wait,
 * with events in random order (some before the wait starts, some twice, some never, so their
 * timeout fails them) and workers restarted between the phases, ends every run exactly as its
 * events say. The SQL rules are tested with faked time in tests/sql/events_test.ts.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { eventPayload, Flow } from "../../mod.ts";
import type { FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startWorker, stopAll } from "./helpers.ts";

const db = testDatabase(import.meta.url);

const napping = new Flow<{ id: number }>({ slug: "wt_nap" })
  .step({ slug: "before" }, (input) => input.id)
  .sleep({ slug: "nap", dependsOn: ["before"], for: "3 s" })
  .step({ slug: "after", dependsOn: ["nap"] }, (deps) => deps.nap);

db.test("a sleep wakes on the workers' tick, never early, across a restart", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const config = { connectionString: url, scheduleTickIntervalMs: 200 };
  try {
    const first = await startWorker(workers, napping, config);
    const [{ run_id: runId }] = await sql<{ run_id: string }[]>`
      select run_id from pgflow.start_flow('wt_nap', '{"id": 1}')`;
    await waitFor(async () =>
      (await sql`select 1 from pgflow.step_states
                 where run_id = ${runId} and step_slug = 'nap' and status = 'started'`)[0], {
      what: "the sleep to start",
    });
    // Everything stops while it sleeps; a new worker picks the timer up from its row.
    await first.worker.stop();
    await startWorker(workers, napping, config);
    await waitFor(
      async () =>
        (await sql`select 1 from pgflow.runs where run_id = ${runId} and status = 'completed'`)[0],
      {
        what: "the run to complete",
      },
    );
    const [nap] = await sql<{ due: string; woke: string; late_ms: number; output: string }[]>`
      select wait_until::text as due, completed_at::text as woke, output #>> '{}' as output,
             (extract(epoch from completed_at - wait_until) * 1000)::int as late_ms
      from pgflow.step_states where run_id = ${runId} and step_slug = 'nap'`;
    assert.ok(nap.late_ms >= 0, `woke ${nap.woke}, before its time ${nap.due}`);
    assert.equal(new Date(nap.output).getTime(), new Date(nap.due).getTime());
    console.log(`sleep woke ${nap.late_ms} ms after its time (tick every 200 ms)`);
  } finally {
    await stopAll(workers);
  }
});

const idle = new Flow<{ orderId: string }>({ slug: "wt_idle" })
  .waitForEvent({ slug: "approval", event: "idle_approved", key: "$.orderId", timeout: "1 day" })
  .step({ slug: "done", dependsOn: ["approval"] }, () => true);

/** Tuples of step_states read so far (sequential and index scans), as flushed statistics. */
async function stepStateReads(conn: postgres.ReservedSql): Promise<number> {
  // This session's own counts reach shared memory at the end of its next transaction.
  await conn`select pg_stat_force_next_flush()`;
  await conn`select pg_stat_clear_snapshot()`;
  const [{ n }] = await conn<{ n: string }[]>`
    select (coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0))::text as n
    from pg_stat_user_tables where schemaname = 'pgflow' and relname = 'step_states'`;
  return Number(n);
}

db.test("10,000 waiting runs add nothing to an idle worker's poll", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const conn = await sql.reserve();
  try {
    // Compiled by a first worker, stopped before the waits exist.
    await startWorker(workers, idle, { connectionString: url });
    await stopAll(workers);
    await conn`select pgflow.start_flow('wt_idle', jsonb_build_object('orderId', 'O-' || i))
               from generate_series(1, 10000) i`;
    const before = await stepStateReads(conn);
    // A worker that polls (every 20 ms) and ticks (every 200 ms) for 3 s.
    const { worker } = await startWorker(workers, idle, {
      connectionString: url,
      scheduleTickIntervalMs: 200,
    });
    await new Promise((resolve) => setTimeout(resolve, 3000));
    await worker.stop();
    // A closed session has flushed its statistics.
    await waitFor(async () => {
      const [{ open }] = await conn<{ open: number }[]>`
        select count(*)::int as open from pg_stat_activity
        where datname = current_database() and pid <> pg_backend_pid() and backend_type = 'client backend'
          and application_name <> 'pgflow_test'`;
      return open === 0;
    }, { what: "the worker's sessions to close" }).catch(() => undefined);
    const after = await stepStateReads(conn);
    assert.equal(after - before, 0, "the poll and the tick read no waiting step");
    const [{ waiting }] = await conn<{ waiting: number }[]>`
      select count(*)::int as waiting from pgflow.step_states
      where step_slug = 'approval' and status = 'started' and waiting_for = 'idle_approved'`;
    assert.equal(waiting, 10000, "every run still waits");
  } finally {
    conn.release();
    await stopAll(workers);
  }
});

const approval = new Flow<{ orderId: string }>({ slug: "wt_approval" })
  .step({ slug: "submit" }, (input) => input.orderId)
  .waitForEvent({
    slug: "decision",
    dependsOn: ["submit"],
    event: "wt_decided",
    key: "$.orderId",
    payload: eventPayload<{ approved: boolean; n: number }>(),
    // Long enough for the phases below on a loaded machine; only the runs with no event reach it.
    timeout: "40 s",
  })
  .step(
    { slug: "ship", dependsOn: ["decision"], if: { decision: { approved: true } } },
    (deps) => `shipped ${deps.decision.n}`,
  );

/** A small deterministic PRNG (mulberry32), so a failure can be replayed. */
function prng(seed: number): () => number {
  let a = seed;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Plan {
  orderId: string;
  runId: string;
  /** "early": sent before the wait starts; "late": after; "never": no event (a timeout). */
  when: "early" | "late" | "never";
  approved: boolean;
  twice: boolean;
  byKey: boolean;
}

db.test("1,000 approvals: events early, late, twice or never, workers restarted between", async ({ sql, url }) => {
  const seed = Number(Deno.env.get("WAIT_SEED") ?? 20261206);
  const random = prng(seed);
  const workers: FlowWorker[] = [];
  const config = { connectionString: url, scheduleTickIntervalMs: 250, maxConcurrent: 20 };
  const send = async (p: Plan, n: number) => {
    const payload = sql.json({ approved: p.approved, n });
    const [{ r }] = p.byKey
      ? await sql<{ r: { results: { status: string }[] } }[]>`
          select pgflow.send_event('wt_decided', ${payload}, key => ${p.orderId}) as r`
      : await sql<{ r: { results: { status: string }[] } }[]>`
          select pgflow.send_event('wt_decided', ${payload}, run_id => ${p.runId}::uuid) as r`;
    return r.results.map((x) => x.status);
  };
  try {
    // Compile, then stop: the runs start with no worker, so no wait has started yet.
    await startWorker(workers, approval, config);
    await stopAll(workers);
    const plans: Plan[] = [];
    for (let i = 0; i < 1000; i++) {
      const orderId = `A-${i}`;
      const [{ run_id }] = await sql<{ run_id: string }[]>`
        select run_id from pgflow.start_flow('wt_approval', ${sql.json({ orderId })})`;
      const r = random();
      plans.push({
        orderId,
        runId: run_id,
        when: r < 0.2 ? "early" : r < 0.3 ? "never" : "late",
        approved: random() < 0.5,
        twice: random() < 0.25,
        byKey: random() < 0.5,
      });
    }
    const shuffled = (list: Plan[]) =>
      list.map((p) => [random(), p] as const).sort((a, b) => a[0] - b[0]).map(([, p]) => p);
    const sentFirst = new Map<string, number>();
    // Phase 1: the early events, before any wait starts; a second one is ignored.
    for (const p of shuffled(plans.filter((p) => p.when === "early"))) {
      assert.deepEqual(await send(p, 1), ["kept"], `early event of ${p.orderId}`);
      sentFirst.set(p.runId, 1);
      if (p.twice) assert.deepEqual(await send(p, 2), ["ignored"]);
    }
    // Phase 2: a worker runs every submit; the early runs go on at once, the others wait.
    await startWorker(workers, approval, config);
    const late = plans.filter((p) => p.when !== "early");
    await waitFor(async () => {
      const [{ n }] = await sql<{ n: number }[]>`
        select count(*)::int as n from pgflow.step_states
        where step_slug = 'decision' and status = 'started' and flow_slug = 'wt_approval'`;
      return n === late.length;
    }, { what: `${late.length} waits to start`, timeoutMs: 120_000 });
    await stopAll(workers);
    workers.length = 0;
    // Phase 3: with no worker running, the late events in random order, some twice.
    for (const p of shuffled(late.filter((p) => p.when === "late"))) {
      assert.deepEqual(await send(p, 1), ["delivered"], `event of ${p.orderId}`);
      sentFirst.set(p.runId, 1);
    }
    for (const p of shuffled(plans.filter((p) => p.when === "late" && p.twice))) {
      assert.deepEqual(await send(p, 2), ["ignored"], `second event of ${p.orderId}`);
    }
    // Phase 4: new workers finish the runs; their tick fails the runs that got no event.
    await startWorker(workers, approval, config);
    await startWorker(workers, approval, config);
    await waitFor(async () => {
      const [{ n }] = await sql<{ n: number }[]>`
        select count(*)::int as n from pgflow.runs where flow_slug = 'wt_approval' and status = 'started'`;
      return n === 0;
    }, { what: "every run to end", timeoutMs: 180_000 });

    const rows = await sql<
      {
        run_id: string;
        status: string;
        error_message: string | null;
        output: unknown;
        decision: unknown;
      }[]
    >`
      select r.run_id, r.status, r.error_message, r.output, d.output as decision
      from pgflow.runs r join pgflow.step_states d on d.run_id = r.run_id and d.step_slug = 'decision'
      where r.flow_slug = 'wt_approval'`;
    const byRun = new Map(rows.map((r) => [r.run_id, r]));
    const wrong: string[] = [];
    for (const p of plans) {
      const row = byRun.get(p.runId)!;
      const expected = p.when === "never"
        ? { status: "failed", decision: null, ship: undefined }
        : {
          status: "completed",
          decision: { approved: p.approved, n: sentFirst.get(p.runId) },
          ship: p.approved ? `shipped 1` : undefined,
        };
      const actual = {
        status: row.status,
        decision: row.decision,
        ship: (row.output as { ship?: string } | null)?.ship,
      };
      try {
        assert.deepEqual(actual, expected);
        if (p.when === "never") {
          assert.match(row.error_message ?? "", /^\[WAIT_TIMEOUT\] step decision/);
        }
      } catch {
        wrong.push(`${p.orderId} (${p.when}, seed ${seed}): ${JSON.stringify(actual)}`);
      }
    }
    assert.deepEqual(wrong.slice(0, 10), [], `${wrong.length} runs ended unlike their events`);
    const [{ kept }] = await sql<
      { kept: number }[]
    >`select count(*)::int as kept from pgflow.pending_events`;
    assert.equal(kept, 0, "every kept event was delivered");
  } finally {
    await stopAll(workers);
  }
});
