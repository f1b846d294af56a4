/**
 * Workers that serve different pairs on one queue (every deploy that changes a handler set looks
 * like this for a while): a message read by a worker that cannot claim it reaches one that can,
 * whatever the others read and however their polls line up. Short timeouts (visibility 2 s, reads
 * every 2 s) make a message hidden by the wrong reader cost a whole timeout, and reads that line
 * up with its reappearance hide it again: before hand-backs, some runs never finished.
 */
import assert from "node:assert/strict";
import type postgres from "postgres";
import { createPool, Flow, type FlowWorker, routeFlow } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { type Child, killChild, spawnDeno } from "../e2e/process.ts";
import { MIXED_FLOWS, MIXED_QUEUE } from "./fixtures/mixed_flows.ts";
import { startWorker, stopAll } from "./helpers.ts";
import { runBehindBacklog } from "./fixtures/neighbour_backlog.ts";

const db = testDatabase(import.meta.url);

const VT = 2;
/** Each worker reads with a 2 s visibility and (with no notification) every 2 s. */
const MIXED = { queueName: MIXED_QUEUE, visibilityTimeout: VT, maxPollSeconds: VT };

/** Starts `n` runs of `flow` and returns their ids. */
async function startRuns(sql: postgres.Sql, flow: string, n: number): Promise<string[]> {
  const rows = await sql<{ run_id: string }[]>`
    select (pgflow.start_flow(${flow}, jsonb_build_object('n', i))).run_id
    from generate_series(1, ${n}) i`;
  return rows.map((r) => r.run_id);
}

/** Waits until every run completed; returns each task's pickup (queued to started) in seconds. */
async function pickups(sql: postgres.Sql, runIds: string[], timeoutMs = 60_000) {
  await waitFor(async () => {
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs
                              where run_id = any (${runIds}::uuid[]) and status = 'completed'`;
    return n === runIds.length;
  }, { timeoutMs, what: `${runIds.length} runs to complete` });
  const rows = await sql<{ s: number }[]>`
    select extract(epoch from started_at - queued_at)::float8 as s from pgflow.step_tasks
    where run_id = any (${runIds}::uuid[])`;
  return rows.map((r) => r.s).sort((a, b) => a - b);
}

const p95 = (sorted: number[]) => sorted[Math.ceil(sorted.length * 0.95) - 1];

db.test("one process, one worker serving a flow and three that do not: every run completes, picked up within 1.5 timeouts, 10 of 10 times", async ({ sql, url }) => {
  const workers: FlowWorker[] = [];
  try {
    for (const flow of MIXED_FLOWS) {
      await startWorker(workers, [flow], { connectionString: url, ...MIXED });
    }
    for (let rep = 1; rep <= 10; rep++) {
      // Runs of the served flow, with the other flows' work in between.
      const mine = await startRuns(sql, "mixed_a", 20);
      const others = [
        ...await startRuns(sql, "mixed_b", 3),
        ...await startRuns(sql, "mixed_c", 3),
        ...await startRuns(sql, "mixed_d", 3),
      ];
      const times = await pickups(sql, [...mine, ...others]);
      assert.ok(p95(times) <= 1.5 * VT, `repetition ${rep}: pickup p95 ${p95(times)} s`);
    }
  } finally {
    await stopAll(workers);
  }
});

db.test("the workers that do not serve the flow in other processes: every run completes, picked up within 1.5 timeouts", async ({ sql, url }) => {
  const children: Child[] = [];
  const workers: FlowWorker[] = [];
  try {
    for (const slug of ["mixed_b", "mixed_c", "mixed_d"]) {
      const child = spawnDeno(new URL("./fixtures/mixed_worker.ts", import.meta.url).pathname, {
        DATABASE_URL: url,
        MIXED_FLOW: slug,
        VISIBILITY_TIMEOUT: String(VT),
      });
      children.push(child);
    }
    for (const child of children) {
      await waitFor(() => child.output().includes("ready"), {
        what: `a worker process to start: ${child.output()}`,
      });
    }
    await startWorker(workers, [MIXED_FLOWS[0]], { connectionString: url, ...MIXED });
    for (let rep = 1; rep <= 3; rep++) {
      const times = await pickups(sql, await startRuns(sql, "mixed_a", 20));
      assert.ok(p95(times) <= 1.5 * VT, `repetition ${rep}: pickup p95 ${p95(times)} s`);
    }
  } finally {
    await stopAll(workers);
    for (const child of children) await killChild(child, "SIGTERM");
  }
});

db.test("an old worker serving v1 and v2 beside a new one serving v1 to v3: v3 is picked up at once, and the old one says who serves it", async ({ sql, url }) => {
  const version = (v: number) =>
    routeFlow(
      new Flow<{ n: number }>({ slug: `hs_v${v}` }).step({ slug: "work" }, (i) => i.n * v),
      { queues: { work: "hs_q" } },
    );
  const [v1, v2, v3] = [version(1), version(2), version(3)];
  const config = {
    connectionString: url,
    queueName: "hs_q",
    visibilityTimeout: VT,
    maxPollSeconds: VT,
  };
  const workers: FlowWorker[] = [];
  try {
    const old = await startWorker(workers, [v1, v2], {
      ...config,
      functionName: "fn_old",
      logSummaryIntervalMs: 200,
    });
    await startWorker(workers, [v1, v2, v3], { ...config, functionName: "fn_new" });
    for (let rep = 1; rep <= 3; rep++) {
      const times = await pickups(sql, [
        ...await startRuns(sql, "hs_v3", 10),
        ...await startRuns(sql, "hs_v1", 10),
      ]);
      assert.ok(p95(times) <= 1.5 * VT, `repetition ${rep}: pickup p95 ${p95(times)} s`);
    }
    // The old worker read some of v3's messages (it reads the queue too) and says so: handed back
    // to the worker that serves them, named, not "deploy a worker".
    await startRuns(sql, "hs_v3", 30);
    const line = await waitFor(
      () => old.logs.find((l) => l.event === "messages not claimed (handed_back)"),
      { what: "the old worker's report" },
    );
    assert.equal(line.level, "warn");
    assert.deepEqual([line.fields.flow, line.fields.step], ["hs_v3", "work"]);
    assert.match(String(line.fields.servedBy), /^fn_new \(worker [0-9a-f]{8}\)$/);
    assert.match(String(line.fields.action), /same handler set/);
    assert.doesNotMatch(String(line.fields.action), /deploy/);
  } finally {
    await stopAll(workers);
  }
});

db.test("a busy worker's backlog at the head of the queue does not hold another worker's runs back", async ({ sql, url }) => {
  // The busy worker's tasks wait for the test: its backlog stands at the head of the queue until
  // the quick runs are picked up, however the machine's load spreads the two workers' turns.
  let releaseBacklog!: () => void;
  const backlogReleased = new Promise<void>((resolve) => (releaseBacklog = resolve));
  const slow = routeFlow(
    new Flow<{ n: number }>({ slug: "bk_slow" }).step({ slug: "work" }, async (i, ctx) => {
      await Promise.race([
        backlogReleased,
        new Promise((r) => ctx.signal.addEventListener("abort", r, { once: true })),
      ]);
      return i.n;
    }),
    { queues: { work: "bk_q" } },
  );
  const quick = routeFlow(
    new Flow<{ n: number }>({ slug: "bk_quick" }).step({ slug: "work" }, (i) => i.n),
    { queues: { work: "bk_q" } },
  );
  const config = {
    connectionString: url,
    queueName: "bk_q",
    visibilityTimeout: VT,
    maxPollSeconds: VT,
  };
  const workers: FlowWorker[] = [];
  try {
    // One task at a time: 29 of them stand in front of the quick flow's runs.
    await startWorker(workers, [slow], { ...config, maxConcurrent: 1 });
    await startWorker(workers, [quick], config);
    const backlog = await startRuns(sql, "bk_slow", 30);
    const quickRuns = await startRuns(sql, "bk_quick", 5);
    // Each quick run's wait from queued to claimed, by the server's clock: the test's own view of
    // it (its polls, a busy machine's delays) is no part of it.
    const quickPickups = await pickups(sql, quickRuns);
    const [{ left }] = await sql`select count(*)::int as left from pgflow.runs
                                 where run_id = any (${backlog}::uuid[]) and status = 'started'`;
    assert.ok(left > 0, "the backlog was still there");
    const slowest = quickPickups.at(-1)!;
    assert.ok(slowest <= 1.5 * VT, `a quick run waited ${slowest} s to be picked up`);
    releaseBacklog();
    await pickups(sql, backlog, 120_000);
  } finally {
    releaseBacklog();
    await stopAll(workers);
  }
});

db.test("an idle worker behind another flow's backlog of 1,500 at the head of the queue: its 25 runs complete while most of the backlog still waits", async ({ sql, url }) => {
  // Before reads past a backlog, the idle worker's reads met the busy worker's head, handed it
  // back and met it again until the whole backlog had started (all 1,500).
  const { backlogStarted } = await runBehindBacklog(sql, url);
  assert.ok(backlogStarted < 750, `${backlogStarted} of the 1,500 had started`);
});

db.test("reads past another worker's backlog are paced: they hold its messages for a third of a visibility timeout in a row, then at most a fifth of the time", async ({ sql, url }) => {
  const slow = routeFlow(
    new Flow<{ n: number }>({ slug: "pace_g" }).step({ slug: "work" }, async (i) => {
      await new Promise((r) => setTimeout(r, 15));
      return i.n;
    }),
    { queues: { work: "pace_q" } },
  );
  const quick = routeFlow(
    new Flow<{ n: number }>({ slug: "pace_f" }).step({ slug: "work" }, (i) => i.n),
    { queues: { work: "pace_q" } },
  );
  // Each read past of the quick worker, timed around its call: [start, end] in ms.
  const spans: [number, number][] = [];
  const pool = createPool(url, { max: 4 });
  const timed = new Proxy(pool, {
    apply(target, self, args: unknown[]) {
      const query = Reflect.apply(target, self, args) as PromiseLike<unknown>;
      const text = Array.isArray(args[0]) ? args[0].join("?") : "";
      // read_qty is the last argument of both calls (counted from the end: the select list before
      // the call may be a fragment, itself one argument of the template).
      const reads = text.includes("pgflow.read_and_claim(") ||
        text.includes("pgflow.complete_and_claim(");
      const readQty = reads ? args[args.length - 1] : null;
      if (readQty !== null && readQty !== undefined) {
        const started = Date.now();
        query.then(() => spans.push([started, Date.now()]), () => {});
      }
      return query;
    },
  });
  const config = { queueName: "pace_q", visibilityTimeout: 1, maxPollSeconds: 1 };
  const workers: FlowWorker[] = [];
  try {
    // Two slots for 1,500 tasks of 15 ms: the backlog stays ahead for seconds.
    await startWorker(workers, [slow], { ...config, connectionString: url, maxConcurrent: 2 });
    await startWorker(workers, [quick], { ...config, sql: timed });
    await startRuns(sql, "pace_g", 1500);
    const mine = await startRuns(sql, "pace_f", 80);
    await pickups(sql, mine, 60_000);
  } finally {
    await stopAll(workers);
    await pool.end();
  }
  // Ten slots for 80 runs: at least eight reads past, more than a third of a second of them.
  assert.ok(spans.length >= 8, `${spans.length} reads past`);
  const burstMs = 1000 / 3;
  let held = 0;
  for (const [start, end] of spans) {
    // What the reads before this one held, against the budget: the burst, and a fifth of the time
    // since the first began (a quarter of the time not spent holding).
    const allowed = burstMs + (start - spans[0][0]) / 4;
    assert.ok(held <= allowed + 50, `${held} ms held before ${start - spans[0][0]} ms`);
    held += end - start;
  }
});
