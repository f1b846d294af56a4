/**
 * LISTEN/NOTIFY wake-ups: work sent to a queue is announced in the sending transaction, a
 * listening worker reads when told instead of polling, and it loses nothing when its LISTEN
 * connection goes away: it polls meanwhile and reads again once it listens again.
 *
 * The workers here poll as slowly as they may (a read every 60 s, a re-check every 10 s), so a run
 * handled within half a minute, however busy the machine, can only have been announced.
 */
import assert from "node:assert/strict";
import { createPool, Flow, type FlowWorker, routeFlow, type Sql } from "../../mod.ts";
import postgres from "postgres";
import { serverUrl, testDatabase } from "../support/db.ts";
import { startPgBouncer } from "../../local/pgbouncer.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** Announced work is found long before the fallback read (60 s); a busy machine takes seconds. */
const NOTIFIED_WITHIN_MS = 30_000;
/** How long a worker may take to reach a state it is about to reach (a wait for a condition). */
const SOON_MS = 30_000;
const SLOW_POLL = { maxPollSeconds: 60, pollIntervalMs: 10_000 };

function flow(slug: string) {
  return new Flow<{ n: number }>({ slug }).step({ slug: "a" }, (input) => input.n);
}

/**
 * The worker's LISTEN backend while it is registered as waiting for the queue (pgflow.listeners,
 * written by that backend: see supabase/schemas/0045_listeners.sql): its pid and last query.
 */
async function listenBackend(
  sql: postgres.Sql,
  queue: string,
): Promise<{ pid: number; query: string } | undefined> {
  const [row] = await sql<{ pid: number; query: string }[]>`
    select a.pid, a.query from pg_stat_activity a
    join pgflow.listeners l on l.pid = a.pid and l.channel = ${`pgflow_queue:${queue}`}
    where a.application_name = 'pgflow worker' and a.datname = current_database()`;
  return row;
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    const value = await probe();
    if (value !== undefined) return value;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

db.test("a listening worker is woken by the notification, not by its poll", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const f = flow("wk_wake");
    const { logs } = await startWorker(workers, f, { connectionString: url, ...SLOW_POLL });
    const started = logs.find((r) => r.event === "worker started");
    assert.equal(started?.fields.wakeups, "listen");
    // Registered (its row) and then its barrier run: listen_start and listen_barrier go in one
    // round trip, and on a loaded machine the row can be seen while the barrier is still to come.
    const backend = await until("LISTEN backend after its barrier", SOON_MS, async () => {
      const found = await listenBackend(sql, "wk_wake");
      return found !== undefined && /pgflow\.listen_barrier/.test(found.query) ? found : undefined;
    });
    assert.match(backend.query, /pgflow\.listen_barrier/, "the idle worker told senders it waits");
    // Idle: its first read is done and it waits for a notification.
    await new Promise((r) => setTimeout(r, 300));
    for (let n = 1; n <= 3; n++) {
      const sent = Date.now();
      const run = await startRun(sql, "wk_wake", { n });
      assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
      assert.ok(Date.now() - sent < NOTIFIED_WITHIN_MS);
    }
  } finally {
    await stopAll(workers);
  }
  assert.equal(await listenBackend(sql, "wk_wake"), undefined, "stop closes the LISTEN connection");
});

db.test("a notification-only worker still finds work after its LISTEN connection is killed", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const [{ name }] = await sql<{ name: string }[]>`select current_database() as name`;
  // A database cannot refuse connections to itself: this is said from the server's own database.
  const admin = postgres(serverUrl(), { max: 1, onnotice: () => {} });
  let pool: Sql | undefined;
  try {
    const f = flow("wk_killed");
    // The worker's pool is opened (both connections) before the gap, so its reads go on during
    // it: only the LISTEN connection is kept from coming back.
    pool = createPool(url, { max: 2 });
    await Promise.all([pool`select pg_sleep(0.1)`, pool`select pg_sleep(0.1)`]);
    const { logs } = await startWorker(workers, f, { sql: pool, ...SLOW_POLL });
    const first = await until("LISTEN backend", SOON_MS, () => listenBackend(sql, "wk_killed"));
    await new Promise((r) => setTimeout(r, 300));

    // Keep the gap open: while the database takes no new connections the LISTEN cannot come
    // back, and work sent meanwhile is announced to no one.
    await admin.unsafe(`alter database ${name} with allow_connections false`);
    await sql`select pg_terminate_backend(${first.pid})`;
    await new Promise((r) => setTimeout(r, 1000));
    const during = await startRun(sql, "wk_killed", { n: 1 });
    await new Promise((r) => setTimeout(r, 500));
    await admin.unsafe(`alter database ${name} with allow_connections true`);
    const [{ reopened }] = await admin<{ reopened: Date }[]>`select clock_timestamp() as reopened`;
    assert.equal((await waitForRun(sql, during, NOTIFIED_WITHIN_MS)).status, "completed");
    // Found by a read the LISTEN connection's loss or return woke (it is tried again on a backoff
    // that reaches 2 s steps while the database refuses connections), not by the 10 s re-check:
    // claimed soon after the database reopened, by the server's clock (a busy machine delays the
    // test's own view of it far more).
    const [{ after_ms }] = await sql<{ after_ms: number }[]>`
      select extract(epoch from started_at - ${reopened}::timestamptz)::float8 * 1000 as after_ms
      from pgflow.step_tasks where run_id = ${during}::uuid`;
    assert.ok(after_ms < 8_000, `claimed ${after_ms} ms after the database reopened`);
    const second = await until(
      "LISTEN backend again",
      SOON_MS,
      () => listenBackend(sql, "wk_killed"),
    );
    assert.notEqual(second.pid, first.pid);
    const after = await startRun(sql, "wk_killed", { n: 2 });
    assert.equal((await waitForRun(sql, after, NOTIFIED_WITHIN_MS)).status, "completed");
    assert.deepEqual(logs.filter((r) => r.level === "error"), [], "no error was logged");
  } finally {
    await admin.unsafe(`alter database ${name} with allow_connections true`);
    await admin.end();
    await stopAll(workers);
    await pool?.end();
  }
});

db.test("behind PgBouncer in transaction mode the worker polls, and still works", async ({ sql, url }) => {
  const bouncer = await startPgBouncer({
    serverPort: Number(new URL(url).port),
    mode: "transaction",
  });
  const workers: FlowWorker[] = [];
  try {
    const f = flow("wk_pooled");
    const { logs } = await startWorker(workers, f, { connectionString: bouncer.via(url) });
    assert.equal(logs.find((r) => r.event === "worker started")?.fields.wakeups, "poll");
    const run = await startRun(sql, "wk_pooled", { n: 1 });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    assert.equal(await listenBackend(sql, "wk_pooled"), undefined);
  } finally {
    await stopAll(workers);
    await bouncer.destroy();
  }
});

db.test("wakeups: poll never listens; a bad value is a config error naming it", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow("wk_poll"), {
      connectionString: url,
      wakeups: "poll",
    });
    assert.equal(logs.find((r) => r.event === "worker started")?.fields.wakeups, "poll");
    const run = await startRun(sql, "wk_poll", { n: 1 });
    assert.equal((await waitForRun(sql, run)).status, "completed");
    assert.equal(await listenBackend(sql, "wk_poll"), undefined);
  } finally {
    await stopAll(workers);
  }
  await assert.rejects(
    () => startWorker([], flow("wk_bad"), { connectionString: url, wakeups: "notify" }),
    /wakeups must be "auto", "listen" or "poll", got "notify"/,
  );
});

db.test("workers of one process share a LISTEN; a burst larger than a batch spreads over all of them", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    // Each task holds its slot until all six run at once, which they can only do two per worker:
    // a worker that finished its share early could otherwise take another's on a busy machine.
    let running = 0;
    let allRunning!: () => void;
    const sixRunning = new Promise<void>((resolve) => (allRunning = resolve));
    const slow = new Flow<{ n: number }>({ slug: "wk_burst" }).step(
      { slug: "a" },
      async (input, ctx) => {
        if (++running === 6) allRunning();
        await Promise.race([
          sixRunning,
          new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true })),
        ]);
        return input.n;
      },
    );
    for (let i = 0; i < 3; i++) {
      await startWorker(workers, slow, {
        connectionString: url,
        ...SLOW_POLL,
        batchSize: 2,
        maxConcurrent: 2,
      });
    }
    const [{ listeners }] = await sql<{ listeners: number }[]>`
      select count(*)::int as listeners from pg_stat_activity
      where application_name = 'pgflow worker' and datname = current_database()`;
    assert.equal(listeners, 1, "one LISTEN connection for the three workers");
    // One transaction, one notification, six tasks: each worker can take two at a time.
    const runs = await sql.begin(async (tx) => {
      const ids: string[] = [];
      for (let n = 0; n < 6; n++) {
        ids.push(await startRun(tx as unknown as typeof sql, "wk_burst", { n }));
      }
      return ids;
    });
    for (const run of runs) {
      assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
    }
    // The woken worker's full read woke the next, and so on: all three took a share at once.
    const shares = await sql<{ n: number }[]>`
      select count(*)::int as n from pgflow.step_tasks
      where flow_slug = 'wk_burst' group by last_worker_id order by 1`;
    assert.deepEqual(shares.map((s) => s.n), [2, 2, 2]);
  } finally {
    await stopAll(workers);
  }
});

db.test("two workers of one process serving different flows on one queue: a notification taken by the wrong one reaches the right one", async ({ sql, url }) => {
  // Before hand-backs, every other run of a waited for the fallback read (here 60 s): the one
  // notification woke b's worker, whose read hid a's message and passed nothing on.
  const queue = "wk_mixed";
  const a = routeFlow(flow("wk_mixed_a"), { queues: { a: queue } });
  const b = routeFlow(flow("wk_mixed_b"), { queues: { a: queue } });
  const workers: FlowWorker[] = [];
  try {
    const config = { connectionString: url, queueName: queue, visibilityTimeout: 60, ...SLOW_POLL };
    await startWorker(workers, [a], config);
    await startWorker(workers, [b], config);
    for (let i = 0; i < 6; i++) {
      const started = Date.now();
      const run = await startRun(sql, "wk_mixed_a", { n: i });
      assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
      assert.ok(Date.now() - started < NOTIFIED_WITHIN_MS, `run ${i}`);
    }
  } finally {
    await stopAll(workers);
  }
});

db.test("a busy worker stops asking senders to notify its queue, and asks again once idle", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  const waiting = () =>
    sql<{ n: number }[]>`select count(*)::int as n from pgflow.listeners
                         where channel = 'pgflow_queue:wk_busy'`.then((r) => r[0].n);
  try {
    const f = new Flow<{ n: number }>({ slug: "wk_busy" }).step({ slug: "a" }, async (input) => {
      await new Promise((r) => setTimeout(r, 5));
      return input.n;
    });
    await startWorker(workers, f, { connectionString: url, ...SLOW_POLL });
    await until("the idle worker waits", SOON_MS, async () => (await waiting()) === 1 || undefined);
    await sql`select pgflow.start_flow('wk_busy', jsonb_build_object('n', i))
              from generate_series(1, 1500) i`;
    // Sampled through the drain: at some point nobody waits while work is still queued, so its
    // completions commit without a NOTIFY.
    let quietWhileBusy = false;
    await until("the backlog drained", 300_000, async () => {
      const [{ queued }] = await sql<{ queued: number }[]>`
        select count(*)::int as queued from pgflow.step_tasks
        where flow_slug = 'wk_busy' and status = 'queued'`;
      if (queued > 0 && await waiting() === 0) quietWhileBusy = true;
      return queued === 0 || undefined;
    });
    assert.ok(quietWhileBusy, "the busy worker stopped asking for notifications");
    await until("idle again, it waits", SOON_MS, async () => (await waiting()) === 1 || undefined);
    const sent = Date.now();
    const run = await startRun(sql, "wk_busy", { n: 0 });
    assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
    assert.ok(Date.now() - sent < NOTIFIED_WITHIN_MS);
  } finally {
    await stopAll(workers);
  }
  assert.equal(await waiting(), 0, "a stopped worker's row goes with it");
});

db.test("an idle worker completes a step and claims the step it released in one call", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    const chain = new Flow<{ n: number }>({ slug: "wk_chain" })
      .step({ slug: "a" }, (input) => input.n)
      .step({ slug: "b", dependsOn: ["a"] }, (deps) => deps.a + 1);
    await startWorker(workers, chain, { connectionString: url, ...SLOW_POLL });
    for (let n = 0; n < 3; n++) {
      await new Promise((r) => setTimeout(r, 300)); // idle: waiting for a notification
      const run = await startRun(sql, "wk_chain", { n });
      assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
      // One transaction: b was claimed at its start (now()), a completed later in it
      // (clock_timestamp()). Two calls would claim b after a's commit.
      const [{ same }] = await sql<{ same: boolean }[]>`
        select b.started_at <= a.completed_at as same
        from pgflow.step_tasks a join pgflow.step_tasks b on b.run_id = a.run_id
        where a.run_id = ${run} and a.step_slug = 'a' and b.step_slug = 'b'`;
      assert.equal(same, true, `run ${n}: b claimed in the call that completed a`);
    }
  } finally {
    await stopAll(workers);
  }
});

db.test("a worker that cannot tell senders it waits polls meanwhile, says so once, and recovers", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  await sql`alter function pgflow.listen_start(text[]) rename to listen_start_hidden`;
  let renamed = true;
  try {
    const { logs } = await startWorker(workers, flow("wk_refused"), {
      connectionString: url,
      maxPollSeconds: 60,
      pollIntervalMs: 100,
    });
    const run = await startRun(sql, "wk_refused", { n: 1 });
    assert.equal((await waitForRun(sql, run, NOTIFIED_WITHIN_MS)).status, "completed");
    const warned = () => logs.filter((r) => r.event.startsWith("could not tell senders"));
    await until("the warning", SOON_MS, () => Promise.resolve(warned().length > 0 || undefined));
    // It polls every 100 ms meanwhile: a warning per poll would show here as more than one.
    await new Promise((r) => setTimeout(r, 1000));
    const said = warned();
    assert.equal(said.length, 1, "one warning, not one per poll");
    assert.equal(said[0].level, "warn");

    await sql`alter function pgflow.listen_start_hidden(text[]) rename to listen_start`;
    renamed = false;
    await until("it waits again", SOON_MS, () => listenBackend(sql, "wk_refused"));
    const sent = Date.now();
    const after = await startRun(sql, "wk_refused", { n: 2 });
    assert.equal((await waitForRun(sql, after, NOTIFIED_WITHIN_MS)).status, "completed");
    assert.ok(Date.now() - sent < NOTIFIED_WITHIN_MS);
  } finally {
    if (renamed) {
      await sql`alter function pgflow.listen_start_hidden(text[]) rename to listen_start`;
    }
    await stopAll(workers);
  }
});
