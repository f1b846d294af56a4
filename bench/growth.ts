/**
 * Cost as the work grows (issue 48's growth curves), on a durable throw-away server (or
 * `DATABASE_URL`):
 *
 * - a map of 10, 1,000, 10,000 and 100,000 elements (`payload_map`: `double` maps over the run
 *   input, `sum` adds the aggregate), run by one worker process with an Edge isolate's heap
 *   (`payloads_worker.ts`: batch 100, concurrency 100): the start's time and WAL, the time to the
 *   run's end and per element, the aggregate's cost (the `jsonb_agg` of the map's outputs that
 *   completes the step, timed in SQL after the run), the worker's peak RSS and heap;
 * - step outputs of 1 KB, 100 KB and 5 MB (`payload_output`, records of ~100 bytes) through the
 *   same worker: time to the end, peak RSS and heap, heap per MB;
 * - a 50-step chain and a 50-wide fan-in (50 roots, one step depending on all of them) beside a
 *   3-step chain, one worker in this process at its defaults: unloaded run time, median of runs
 *   started one at a time;
 * - claim cost with 200 live workers registered on the queue against 1: one `read_and_claim` of
 *   10 tasks from a backlog, as a worker calls it.
 *
 * Prints markdown tables and a text chart made from the same figures; with `--write`, puts them
 * in `bench/results.md` between `<!-- growth:start -->` and `<!-- growth:end -->`. Nothing is
 * asserted.
 *
 * `deno run -A bench/growth.ts [--quick] [--write]`
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createLogger, createWorker, Flow } from "../mod.ts";
import { ensureFlowCompiled } from "../tools.ts";
import { settled, startIsolateWorker, startMapRun, startOutputRun } from "./payloads.ts";
import { PAYLOAD_FLOWS } from "./payloads_worker.ts";
import { median, percentile } from "./stats.ts";
import { wallMs } from "./clock.ts";
import { writeResultsBlock } from "./results_block.ts";

const QUICK = Deno.args.includes("--quick");
const WRITE = Deno.args.includes("--write");
const MAP_SIZES = QUICK ? [10, 1_000, 10_000] : [10, 1_000, 10_000, 100_000];
const PAYLOAD_KB = [1, 100, 5 * 1024];
const SHAPE_RUNS = QUICK ? 5 : 15;
const CLAIM_CALLS = QUICK ? 20 : 60;
const MiB = 2 ** 20;

interface MapFigure {
  n: number;
  startMs: number;
  startWalMb: number;
  endS: number;
  perElementUs: number;
  aggregateMs: number;
  rssMb: number;
  heapMb: number;
}

/** `n` steps each depending on the previous one. */
// deno-lint-ignore no-explicit-any
function chainFlow(slug: string, n: number): any {
  // deno-lint-ignore no-explicit-any
  let flow: any = new Flow<unknown>({ slug }).step({ slug: "s0" }, () => 0);
  for (let i = 1; i < n; i++) {
    flow = flow.step({ slug: `s${i}`, dependsOn: [`s${i - 1}`] }, () => i);
  }
  return flow;
}

/** `n` roots and one step depending on all of them. */
// deno-lint-ignore no-explicit-any
function fanInFlow(slug: string, n: number): any {
  // deno-lint-ignore no-explicit-any
  let flow: any = new Flow<unknown>({ slug });
  for (let i = 0; i < n; i++) flow = flow.step({ slug: `r${i}` }, () => i);
  return flow.step(
    { slug: "join", dependsOn: Array.from({ length: n }, (_, i) => `r${i}`) },
    (deps: Record<string, number>) => Object.keys(deps).length,
  );
}

async function walLsn(sql: postgres.Sql): Promise<string> {
  const [{ lsn }] = await sql`select pg_current_wal_lsn()::text as lsn`;
  return lsn;
}

async function walMbSince(sql: postgres.Sql, lsn: string): Promise<number> {
  const [{ bytes }] = await sql`
    select pg_wal_lsn_diff(pg_current_wal_lsn(), ${lsn}::pg_lsn)::float8 as bytes`;
  return bytes / MiB;
}

const db = await openPgflowDatabase({ durable: true });
const sql = postgres(db.url, { max: 2, onnotice: () => {} });
const out: string[] = [];
const print = (line = "") => {
  console.log(line);
  out.push(line);
};

try {
  // Maps and payloads: one worker process with an isolate's heap.
  for (const flow of PAYLOAD_FLOWS) await ensureFlowCompiled(sql, flow);
  const isolate = await startIsolateWorker(db.url);
  const maps: MapFigure[] = [];
  const payloads: { kb: number; endS: number; rssMb: number; heapMb: number }[] = [];
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const idleRss = isolate.peakRss() / MiB;
    const idleHeap = (await isolate.heapPeak()) / MiB;
    for (const n of MAP_SIZES) {
      await isolate.heapPeak();
      isolate.resetPeak();
      await sql`checkpoint`;
      const lsn = await walLsn(sql);
      const t0 = wallMs();
      const runId = await startMapRun(sql, n);
      const startMs = wallMs() - t0;
      const startWalMb = await walMbSince(sql, lsn);
      const status = await settled(sql, runId, 1_800_000);
      const endS = (wallMs() - t0) / 1000;
      if (status !== "completed") throw new Error(`map of ${n}: the run ended ${status}`);
      const aggregate: number[] = [];
      for (let i = 0; i < 3; i++) {
        const a0 = wallMs();
        await sql`select length(jsonb_agg(t.output order by t.task_index)::text) from pgflow.step_tasks t
                  where t.run_id = ${runId}::uuid and t.step_slug = 'double'`;
        aggregate.push(wallMs() - a0);
      }
      maps.push({
        n,
        startMs,
        startWalMb,
        endS,
        perElementUs: endS * 1e6 / n,
        aggregateMs: median(aggregate),
        rssMb: isolate.peakRss() / MiB,
        heapMb: (await isolate.heapPeak()) / MiB,
      });
      console.error(`map of ${n}: ${endS.toFixed(1)} s`);
    }
    for (const kb of PAYLOAD_KB) {
      await isolate.heapPeak();
      isolate.resetPeak();
      const t0 = wallMs();
      const status = await settled(
        sql,
        await startOutputRun(sql, { mb: kb / 1024, shape: "records" }),
        600_000,
      );
      if (status !== "completed") throw new Error(`payload of ${kb} KB: the run ended ${status}`);
      payloads.push({
        kb,
        endS: (wallMs() - t0) / 1000,
        rssMb: isolate.peakRss() / MiB,
        heapMb: (await isolate.heapPeak()) / MiB,
      });
      console.error(`payload of ${kb} KB done`);
    }

    print(
      `| map of N elements (1 worker process, batch 100, concurrency 100, 256 MB heap) | start ms | start WAL MB | to the run's end s | per element µs | × per element at 1,000 | aggregate ms | peak RSS MiB | peak heap MiB |`,
    );
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    const at1000 = maps.find((m) => m.n === 1_000)!.perElementUs;
    for (const m of maps) {
      print(
        `| ${m.n.toLocaleString("en")} | ${m.startMs.toFixed(1)} | ${m.startWalMb.toFixed(2)} | ${
          m.endS.toFixed(2)
        } | ${m.perElementUs.toFixed(0)} | ${(m.perElementUs / at1000).toFixed(2)}× | ${
          m.aggregateMs.toFixed(1)
        } | ${m.rssMb.toFixed(0)} | ${m.heapMb.toFixed(0)} |`,
      );
    }
    print();
    print(
      `| one step's output (records of ~100 bytes), made by one step and read by the next | to the run's end s | peak RSS MiB | peak heap MiB | heap above idle per MB |`,
    );
    print("|---:|---:|---:|---:|---:|");
    for (const p of payloads) {
      print(
        `| ${p.kb >= 1024 ? `${p.kb / 1024} MB` : `${p.kb} KB`} | ${p.endS.toFixed(2)} | ${
          p.rssMb.toFixed(0)
        } | ${p.heapMb.toFixed(0)} | ${
          // Below 100 KB the payload is lost in the heap's own swings: no figure per MB.
          p.kb < 100 ? "–" : `${((p.heapMb - idleHeap) / (p.kb / 1024)).toFixed(1)} MiB`} |`,
      );
    }
    print(
      `\n(idle worker: RSS ${idleRss.toFixed(0)} MiB, heap ${
        idleHeap.toFixed(0)
      } MiB. Peak RSS is ` +
        "the kernel's high-water mark, reset before each run where the kernel allows it " +
        "(/proc/<pid>/clear_refs); where it does not, it only grows from one row to the next.)",
    );

    // The chart: per-element time of the map against its size, from the table above, scaled to
    // the largest from 1,000 elements up (where the target is); a smaller map's fixed cost per
    // run is off the scale and says so.
    print("\n```text");
    print("map: µs per element (to the run's end ÷ N); 50 # = the largest from 1,000 elements up");
    const widest = Math.max(...maps.filter((m) => m.n >= 1_000).map((m) => m.perElementUs));
    for (const m of maps) {
      const width = Math.round(50 * m.perElementUs / widest);
      const bar = width > 60 ? `${"#".repeat(60)}…` : "#".repeat(Math.max(1, width));
      print(`${m.n.toLocaleString("en").padStart(8)} | ${bar} ${m.perElementUs.toFixed(0)}`);
    }
    print("```");
  } finally {
    await isolate.stop();
  }

  // Shapes: a 3-step chain, a 50-step chain, a 50-wide fan-in; one worker at its defaults each.
  const shapes: [string, string, number][] = [
    ["3-step chain", "growth_chain3", 3],
    ["50-step chain", "growth_chain50", 50],
    ["50-wide fan-in (50 roots → 1)", "growth_fanin50", 51],
  ];
  print();
  print(
    "| run shape (1 worker at its defaults, runs started one at a time, unloaded) | steps | run p50 ms | p95 ms | ms per step (p50) |",
  );
  print("|---|---:|---:|---:|---:|");
  for (const [label, slug, steps] of shapes) {
    const flow = slug.startsWith("growth_fanin") ? fanInFlow(slug, 50) : chainFlow(slug, steps);
    const worker = createWorker(flow, {
      connectionString: db.url,
      functionName: "growth",
      logger: createLogger({ level: "warn" }),
    });
    await worker.start();
    try {
      const times: number[] = [];
      for (let i = 0; i <= SHAPE_RUNS; i++) {
        const [{ run_id }] = await sql`select run_id from pgflow.start_flow(${slug}, '{}')`;
        await settled(sql, run_id, 120_000);
        const [{ ms }] = await sql`select extract(epoch from completed_at - started_at) * 1000 as ms
                                   from pgflow.runs where run_id = ${run_id}`;
        if (i > 0) times.push(Number(ms));
      }
      const p50 = median(times);
      print(
        `| ${label} | ${steps} | ${p50.toFixed(1)} | ${percentile(times, 95).toFixed(1)} | ${
          (p50 / steps).toFixed(2)
        } |`,
      );
    } finally {
      await worker.stop();
    }
  }

  // Claim cost on a queue with 1 live worker and on one with 200 (the same flow twice, a queue
  // each), measured alternately so a drift of the machine falls on both. Every worker's heartbeat
  // is renewed before each call: all stay live throughout.
  const queues = { "1": "growth_claim_1", "200": "growth_claim_200" } as const;
  const measuring: Record<"1" | "200", string> = { "1": "", "200": "" };
  const everyone: string[] = [];
  for (const [live, queue] of Object.entries(queues) as ["1" | "200", string][]) {
    await ensureFlowCompiled(
      sql,
      new Flow<unknown>({ slug: queue }).step({ slug: "work" }, () => null),
    );
    const pairs = JSON.stringify([[queue, "work"]]);
    const ids = Array.from({ length: Number(live) }, () => crypto.randomUUID());
    await sql`select count(pgflow.register_worker(w, ${queue}, 'growth', ${pairs}::text::jsonb))
              from unnest(${ids}::uuid[]) w`;
    measuring[live] = ids[0];
    everyone.push(...ids);
    await sql`select pgflow.start_flows(${queue},
                (select jsonb_agg('{}'::jsonb) from generate_series(1, ${
      (CLAIM_CALLS + 2) * 10
    }::int)))`;
  }
  const claimMs: Record<"1" | "200", number[]> = { "1": [], "200": [] };
  for (let call = 0; call <= CLAIM_CALLS; call++) {
    for (const live of call % 2 === 0 ? ["1", "200"] as const : ["200", "1"] as const) {
      await sql`select count(pgflow.heartbeat(w)) from unnest(${everyone}::uuid[]) w`;
      const t0 = wallMs();
      const rows = await sql`select * from pgflow.read_and_claim(${queues[live]},
                               ${measuring[live]}::uuid, 30, 10, 1, 50)`;
      const ms = wallMs() - t0;
      if (rows.length === 0) throw new Error("the claim found no task");
      if (call > 0) claimMs[live].push(ms);
      await sql`select count(*) from pgflow.step_tasks t
                cross join lateral pgflow.complete_task(t.run_id, t.step_slug, t.task_index,
                                                        'null'::jsonb, t.attempts_count) c
                where t.flow_slug = ${queues[live]} and t.status = 'started'`;
    }
  }
  const one = median(claimMs["1"]);
  const many = median(claimMs["200"]);
  print();
  print(
    "| read_and_claim of 10 tasks (backlog present) | calls | ms p50 | p95 | × 1 worker |",
  );
  print("|---|---:|---:|---:|---:|");
  print(
    `| 1 live worker on the queue | ${claimMs["1"].length} | ${one.toFixed(2)} | ${
      percentile(claimMs["1"], 95).toFixed(2)
    } | 1.00× |`,
  );
  print(
    `| 200 live workers on the queue | ${claimMs["200"].length} | ${many.toFixed(2)} | ${
      percentile(claimMs["200"], 95).toFixed(2)
    } | ${(many / one).toFixed(2)}× |`,
  );

  const perElement = (n: number) => maps.find((m) => m.n === n)?.perElementUs;
  const largest = maps[maps.length - 1];
  const flatness = largest.perElementUs / perElement(1_000)!;
  print();
  print("| target | measured | met |");
  print("|---|---:|---:|");
  print(
    `| map: per-element cost flat within 1.5× from 1,000 to ${
      largest.n.toLocaleString("en")
    } elements | ${flatness.toFixed(2)}× | ${flatness <= 1.5 ? "yes" : "**no**"} |`,
  );
  print(
    `| claim cost with 200 live workers ≤ 1.2× with 1 | ${(many / one).toFixed(2)}× | ${
      many / one <= 1.2 ? "yes" : "**no**"
    } |`,
  );
  const big = payloads[payloads.length - 1];
  print(
    `| worker memory per MB of payload stated | peak heap ${big.heapMb.toFixed(0)} MiB for ${
      big.kb / 1024
    } MB of output (${(big.heapMb / (big.kb / 1024)).toFixed(1)} MiB per MB) | yes |`,
  );
} finally {
  await sql.end({ timeout: 5 });
  await db.close();
}

if (WRITE) {
  writeResultsBlock("growth", `deno run -A bench/growth.ts${QUICK ? " --quick" : ""} --write`, out);
}
