/**
 * The Edge soak: workers in the runtime stand-in hand over, again and again, while a steady stream
 * of runs flows through two shared queues (tests/edge/functions/: two versions of a fan-out flow
 * over `edge_a` and `edge_b`, and a storm flow of failing tasks on `edge_a`).
 *
 * Every isolate gets a fate, in turn: the wall clock, the CPU soft limit, the CPU hard limit (soft
 * and hard close together, so the drain is killed), memory (the `work` handlers keep 512 KB each),
 * an early drop (its workers are deprecated, as by a deploy: the worker drains, its `waitUntil`
 * settles, the runtime drops the idle isolate) or SIGKILL. Limits are compressed from minutes to
 * seconds. The keep-alive is `pgflow.ensure_workers()` every 250 ms with pg_net's stand-in and the
 * relay (Debian's pg_cron runs jobs at most once a minute; keep_alive_test.ts proves pg_cron's
 * part), with each function's debounce at 1 s. Stalled recovery is `requeue_stalled_tasks()` on the
 * same tick; the started tasks of an isolate that has ended are backdated first, as if their
 * timeout + 30 s had passed (nothing of an ended isolate runs any more).
 *
 * Checked (`checkSoak`): every run completed; no attempt executed twice; no handler started after
 * its isolate's `beforeunload`; an execution was followed by another of its task only when it
 * failed on purpose or its isolate was killed before it reported; each isolate wrote under 100
 * lines in any 10 s; each fate happened. Figures: hand-over time (from `beforeunload`, or the
 * kill, to the next worker of the function polling) and the throughput dip.
 *
 * `deno task soak:edge [seconds]` runs a longer soak and prints its figures.
 *
 * @module
 */
import type postgres from "postgres";
import { startEdgeCluster } from "./cluster.ts";
import { ROOT_CONFIG, SECRET } from "./functions.ts";
import { EXEC_TABLE } from "./functions/_soak/flows.ts";
import { startRelay } from "./relay.ts";
import {
  type EdgeFunctionSpec,
  EdgeSupervisor,
  type IsolateLimits,
  type IsolateRecord,
} from "./runtime/supervisor.ts";

/** What an isolate is made to meet. */
export type Fate = "wall clock" | "cpu soft" | "cpu hard" | "memory" | "early drop" | "sigkill";

const FATES: readonly Fate[] = [
  "wall clock",
  "cpu soft",
  "memory",
  "sigkill",
  "cpu hard",
  "early drop",
];

/** Options of {@link runEdgeSoak}. */
export interface SoakOptions {
  /** Least time runs are started for. */
  readonly minSeconds: number;
  /** Least isolate ends before the stream stops. */
  readonly minEnds: number;
  /** Most time runs are started for. */
  readonly maxSeconds: number;
  /** Fan-out runs started per second (half each version). */
  readonly runsPerSecond: number;
  /** Storm runs started per second. */
  readonly stormPerSecond: number;
  /** Progress lines. */
  readonly log?: (line: string) => void;
}

/** What the soak measured. */
export interface SoakFigures {
  readonly seconds: number;
  readonly runs: number;
  readonly tasks: number;
  readonly executions: number;
  readonly failedOnPurpose: number;
  readonly reexecutedAfterKill: number;
  readonly isolates: number;
  readonly ends: Readonly<Record<string, number>>;
  readonly unloads: Readonly<Record<string, number>>;
  readonly handoverMs: Readonly<Record<string, { n: number; median: number; max: number }>>;
  readonly maxLinesPer10s: number;
  readonly throughput: { readonly steadyPerSecond: number; readonly inHandoverPerSecond: number };
  readonly problems: readonly string[];
}

function fnSpec(name: string, url: string): EdgeFunctionSpec {
  return {
    name,
    entry: new URL(`./functions/${name}/index.ts`, import.meta.url).pathname,
    config: ROOT_CONFIG,
    env: { EDGE_WORKER_DB_URL: url, PGFLOW_AUTH_SECRET: SECRET, EDGE_WORKER_LOG_LEVEL: "info" },
  };
}

/** The limits that bring each fate about (the others are out of reach). */
function limitsOf(fate: Fate): Partial<IsolateLimits> {
  const calm = {
    wallClockMs: 12_000,
    unloadNoticeMs: 1_500,
    cpuSoftMs: 60_000,
    cpuHardMs: 60_000,
    memoryMb: 4_000,
    graceMs: 1_500,
  };
  switch (fate) {
    case "wall clock":
      return { ...calm, wallClockMs: 3_500 + Math.round(Math.random() * 2_000) };
    case "cpu soft":
      return { ...calm, cpuSoftMs: 400 };
    case "cpu hard":
      return { ...calm, cpuSoftMs: 400, cpuHardMs: 410 };
    case "memory":
      // Set just above the isolate's size once it polls (runEdgeSoak).
      return calm;
    default:
      return calm;
  }
}

/**
 * Runs the soak on a cluster of its own and returns its figures; `problems` lists every broken
 * invariant (empty when all held).
 *
 * @example
 * ```ts
 * const figures = await runEdgeSoak({ minSeconds: 45, minEnds: 30, maxSeconds: 90, runsPerSecond: 3, stormPerSecond: 10 });
 * ```
 */
export async function runEdgeSoak(options: SoakOptions): Promise<SoakFigures> {
  const log = options.log ?? (() => {});
  const started = Date.now();
  const cluster = await startEdgeCluster();
  const { sql } = cluster;
  const fates = new Map<string, Fate>();
  let fateIndex = 0;
  const memoryBase = new Map<string, number>();
  const supervisor = new EdgeSupervisor({
    functions: [fnSpec("soak_a", cluster.url), fnSpec("soak_b", cluster.url)],
    limitsFor: () => {
      const fate = FATES[fateIndex++ % FATES.length];
      const limits = limitsOf(fate);
      pendingFates.push(fate);
      return limits;
    },
    onEvent: (record, event) => {
      if (event === "spawn") fates.set(record.id, pendingFates.shift()!);
      log(
        `${event} ${record.fn} ${record.id.slice(0, 8)} (${fates.get(record.id)})${
          event === "unload"
            ? ` ${record.unload!.reason}`
            : event === "end"
            ? ` ${record.end!.cause}`
            : ""
        }`,
      );
    },
  });
  const pendingFates: Fate[] = [];
  await supervisor.start();
  const relay = startRelay(sql, supervisor.url, 50);
  const runIds: string[] = [];
  const stops: (() => Promise<void>)[] = [];
  try {
    await sql.unsafe(EXEC_TABLE);
    await sql`select vault.create_secret(${supervisor.url}, 'supabase_project_url')`;
    await sql`select vault.create_secret(${SECRET}, 'pgflow_auth_secret')`;
    await sql`insert into pgflow.worker_functions (function_name, debounce)
              values ('soak_a', '1 second'), ('soak_b', '1 second')`;

    // The keep-alive and stalled recovery, every 250 ms.
    stops.push(every(250, async () => {
      const ended = supervisor.isolates.filter((r) => r.end !== undefined).map((r) => r.id);
      if (ended.length > 0) {
        await sql`update pgflow.step_tasks set started_at = started_at - interval '1 hour'
                  where status = 'started' and last_worker_id::text = any(${ended})
                    and started_at > now() - interval '1 hour'`;
      }
      await sql`select pgflow.requeue_stalled_tasks()`;
      await sql`select * from pgflow.ensure_workers()`;
    }));
    // The fates the soak brings about itself: memory (a limit just above the isolate's size once
    // it polls), early drop (deprecation) and SIGKILL.
    stops.push(every(100, async () => {
      for (const record of supervisor.isolates) {
        if (record.end !== undefined || record.unload !== undefined) continue;
        const fate = fates.get(record.id);
        const polling = pollingAt(record);
        if (polling === undefined) continue;
        const age = Date.now() - polling;
        if (fate === "memory") {
          if (!memoryBase.has(record.id) && record.rssMb > 0) {
            memoryBase.set(record.id, record.rssMb);
            (record.limits as { memoryMb: number }).memoryMb = record.rssMb + 25;
          }
        } else if (fate === "early drop" && age > 2_500) {
          await sql`select pgflow.deprecate_workers(${record.fn})`;
          // Deprecation reaches the worker with its next heartbeat; once set, not again.
          fates.set(record.id, "early drop (deprecated)" as Fate);
        } else if (fate === "sigkill" && age > 2_000 + Math.random() * 1_000) {
          supervisor.kill(record.id);
        }
      }
    }));

    // The first start: pinged by the keep-alive like every later one.
    await waitUntil(
      () => supervisor.isolates.filter((r) => pollingAt(r) !== undefined).length >= 2,
      60_000,
      "the first workers",
    );
    // Fresh deprecations would block compile of nothing; the flows exist once both workers ran.
    log("workers polling; starting runs");
    const streamStart = Date.now();
    let tick = 0;
    while (true) {
      const elapsed = (Date.now() - streamStart) / 1000;
      const ends = supervisor.isolates.filter((r) => r.end !== undefined).length;
      if (elapsed >= options.maxSeconds) break;
      if (elapsed >= options.minSeconds && ends >= options.minEnds) break;
      const perTick = options.runsPerSecond / 4;
      const fanout = Math.floor(perTick) + (Math.random() < perTick % 1 ? 1 : 0);
      const storms = Math.floor(options.stormPerSecond / 4) +
        (Math.random() < (options.stormPerSecond / 4) % 1 ? 1 : 0);
      const rows = await sql<{ run_id: string }[]>`
        select (pgflow.start_flow(case when g % 2 = ${
        tick % 2
      } then 'edge_soak_v1' else 'edge_soak_v2' end,
                                  '{"n": 4}'::jsonb)).run_id
        from generate_series(1, ${fanout}::int) g
        union all
        select (pgflow.start_flow('edge_storm_v1', '{"n": 0}'::jsonb)).run_id
        from generate_series(1, ${storms}::int)`;
      runIds.push(...rows.map((r) => r.run_id));
      tick++;
      await new Promise((r) => setTimeout(r, 250));
    }
    const streamEnd = Date.now();
    log(
      `stream stopped after ${
        Math.round((streamEnd - streamStart) / 1000)
      } s, ${runIds.length} runs; waiting for them`,
    );
    await waitForDrain(sql);
    for (const stop of stops.splice(0)) await stop();
    await supervisor.stop();
    return await checkSoak(
      sql,
      supervisor.isolates,
      runIds,
      streamStart,
      streamEnd,
      started,
    );
  } finally {
    for (const stop of stops) await stop().catch(() => {});
    await relay.stop();
    await supervisor.stop().catch(() => {});
    await cluster.destroy();
  }
}

/** When the isolate's worker logged "worker started" (it polls from then on). */
function pollingAt(record: IsolateRecord): number | undefined {
  for (const line of record.lines) {
    if (!line.text.includes('"worker started"')) continue;
    try {
      return Date.parse(JSON.parse(line.text).time);
    } catch {
      return line.at;
    }
  }
  return undefined;
}

const CLEAN = new Set(["drained", "exited"]);

async function checkSoak(
  sql: postgres.Sql,
  isolates: readonly IsolateRecord[],
  runIds: readonly string[],
  streamStart: number,
  streamEnd: number,
  started: number,
): Promise<SoakFigures> {
  const problems: string[] = [];
  const byId = new Map(isolates.map((r) => [r.id, r]));
  const runs = await sql<{ status: string; n: number }[]>`
    select status, count(*)::int as n from pgflow.runs where run_id = any(${runIds}::uuid[]) group by status`;
  for (const r of runs) if (r.status !== "completed") problems.push(`${r.n} runs ${r.status}`);
  const [{ tasks }] = await sql<{ tasks: number }[]>`
    select count(*)::int as tasks from pgflow.step_tasks where run_id = any(${runIds}::uuid[])`;
  const execs = await sql<
    {
      run_id: string;
      step_slug: string;
      task_index: number;
      attempt: number;
      isolate: string;
      late: boolean;
      failed: boolean;
    }[]
  >`select run_id::text, step_slug, task_index, attempt, isolate, late, failed
    from public.edge_exec order by run_id, step_slug, task_index, attempt, at`;
  const late = execs.filter((e) => e.late);
  if (late.length > 0) {
    problems.push(
      `${late.length} handlers started after their isolate's beforeunload (e.g. ${
        late[0].step_slug
      } of run ${late[0].run_id} in ${late[0].isolate})`,
    );
  }
  let reexecutedAfterKill = 0;
  const groups = new Map<string, (typeof execs)[number][]>();
  for (const e of execs) {
    const key = `${e.run_id}/${e.step_slug}/${e.task_index}`;
    const list = groups.get(key);
    if (list === undefined) groups.set(key, [e]);
    else list.push(e);
  }
  for (const [key, list] of groups) {
    const attempts = new Set<number>();
    for (let i = 0; i < list.length; i++) {
      const e = list[i];
      if (attempts.has(e.attempt)) problems.push(`${key} attempt ${e.attempt} executed twice`);
      attempts.add(e.attempt);
      if (i === list.length - 1) {
        if (e.failed) problems.push(`${key}: its last execution failed`);
        continue;
      }
      if (e.failed) continue;
      const end = byId.get(e.isolate)?.end;
      if (end !== undefined && !CLEAN.has(end.cause)) reexecutedAfterKill++;
      else {
        problems.push(
          `${key} attempt ${e.attempt} ran again although its isolate ${
            e.isolate.slice(0, 8)
          } ended ${end?.cause ?? "never"}`,
        );
      }
    }
  }

  const ends: Record<string, number> = {};
  const unloads: Record<string, number> = {};
  for (const r of isolates) {
    if (r.end !== undefined) ends[r.end.cause] = (ends[r.end.cause] ?? 0) + 1;
    if (r.unload !== undefined) unloads[r.unload.reason] = (unloads[r.unload.reason] ?? 0) + 1;
  }
  for (const reason of ["WallClockTime", "CPUTime", "Memory", "EarlyDrop"]) {
    if (!unloads[reason]) problems.push(`no isolate was unloaded with ${reason}`);
  }
  for (const cause of ["sigkill", "cpu hard"]) {
    if (!ends[cause]) problems.push(`no isolate ended by ${cause}`);
  }

  // Log lines per isolate in any 10 s.
  let maxLinesPer10s = 0;
  for (const r of isolates) {
    const times = r.lines.map((l) => l.at);
    for (let i = 0, j = 0; i < times.length; i++) {
      while (times[i] - times[j] >= 10_000) j++;
      maxLinesPer10s = Math.max(maxLinesPer10s, i - j + 1);
    }
  }
  if (maxLinesPer10s >= 100) problems.push(`an isolate wrote ${maxLinesPer10s} lines in 10 s`);

  // Hand-over: from the old worker's beforeunload (or kill) to the next worker of the function
  // polling. An early drop's beforeunload comes after its worker stopped (deprecated), so its
  // hand-over starts at the deprecation: the old worker's "worker deprecated" line.
  const handovers: Record<string, number[]> = {};
  const gaps: [fn: string, from: number, to: number][] = [];
  for (const r of isolates) {
    const from = handoverStart(r);
    if (from === undefined) continue;
    const next = isolates
      .filter((o) => o.fn === r.fn && o !== r)
      .map((o) => pollingAt(o))
      .filter((t): t is number => t !== undefined && t >= from)
      .sort((a, b) => a - b)[0];
    if (next === undefined || from > streamEnd) continue;
    const key = r.unload?.reason ?? r.end!.cause;
    (handovers[key] ??= []).push(next - from);
    gaps.push([r.fn, from, next]);
  }
  const handoverMs: Record<string, { n: number; median: number; max: number }> = {};
  for (const [key, list] of Object.entries(handovers)) {
    list.sort((a, b) => a - b);
    handoverMs[key] = {
      n: list.length,
      median: list[Math.floor(list.length / 2)],
      max: list.at(-1)!,
    };
  }

  // Throughput: tasks completed per second on a queue while it had no polling worker (from a
  // hand-over's start to the next worker polling), and while it had one, during the stream.
  const completions = await sql<{ queue_name: string; ms: number }[]>`
    select queue_name, (extract(epoch from completed_at) * 1000)::float8 as ms
    from pgflow.step_tasks where completed_at is not null and run_id = any(${runIds}::uuid[])`;
  const queueOf: Record<string, string> = { soak_a: "edge_a", soak_b: "edge_b" };
  const from0 = streamStart + 5_000;
  let inGap = 0, gapMs = 0, steady = 0, steadyMs = 0;
  for (const queue of ["edge_a", "edge_b"]) {
    const own = gaps.filter(([fn, from]) => queueOf[fn] === queue && from >= from0)
      .map(([, from, to]) => [from, Math.min(to, streamEnd)] as const)
      .filter(([from, to]) => to > from);
    const inAny = (t: number) => own.some(([from, to]) => t >= from && t < to);
    const covered = own.reduce((n, [from, to]) => n + (to - from), 0);
    gapMs += covered;
    steadyMs += streamEnd - from0 - covered;
    for (const c of completions) {
      if (c.queue_name !== queue || c.ms < from0 || c.ms >= streamEnd) continue;
      if (inAny(c.ms)) inGap++;
      else steady++;
    }
  }
  return {
    seconds: Math.round((Date.now() - started) / 1000),
    runs: runIds.length,
    tasks,
    executions: execs.length,
    failedOnPurpose: execs.filter((e) => e.failed).length,
    reexecutedAfterKill,
    isolates: isolates.length,
    ends,
    unloads,
    handoverMs,
    maxLinesPer10s,
    throughput: {
      steadyPerSecond: round1(steady / Math.max(1, steadyMs / 1000)),
      inHandoverPerSecond: round1(inGap / Math.max(1, gapMs / 1000)),
    },
    problems,
  };
}

function handoverStart(r: IsolateRecord): number | undefined {
  if (r.unload?.reason === "EarlyDrop") {
    const line = r.lines.find((l) => l.text.includes('"worker deprecated'));
    return line === undefined ? undefined : Date.parse(JSON.parse(line.text).time);
  }
  if (r.unload !== undefined) return r.unload.at;
  if (r.end?.cause === "sigkill") return r.end.at;
  return undefined;
}

function round1(n: number): number {
  return Math.round(n * 10) / 10;
}

function every(ms: number, tick: () => Promise<unknown>): () => Promise<void> {
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      await tick().catch(() => {});
      await new Promise((r) => setTimeout(r, ms));
    }
  })();
  return async () => {
    stopped = true;
    await loop;
  };
}

/**
 * Waits until no run is left started. The bound is on progress, not on the whole wait: on a busy
 * machine isolates start slowly and the drain takes minutes, which is no fault; a run that never
 * ends stops the count from falling, and after two minutes of that the soak fails naming it.
 */
async function waitForDrain(sql: postgres.Sql): Promise<void> {
  const stallMs = 120_000;
  let left = Infinity;
  let progressAt = Date.now();
  while (true) {
    const [row] = await sql<{ n: number; some: string[] | null }[]>`
      select count(*)::int as n,
             (array_agg(run_id::text order by started_at))[1:5] as some
      from pgflow.runs where status = 'started'`;
    if (row.n === 0) return;
    if (row.n < left) {
      left = row.n;
      progressAt = Date.now();
    } else if (Date.now() - progressAt > stallMs) {
      throw new Error(
        `${row.n} runs still started and none ended for ${stallMs} ms (first: ${
          row.some?.join(", ")
        })`,
      );
    }
    await new Promise((r) => setTimeout(r, 250));
  }
}

async function waitUntil(
  probe: () => boolean | Promise<boolean>,
  timeoutMs: number,
  what: string,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await probe())) {
    if (Date.now() > deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}

if (import.meta.main) {
  const seconds = Number(Deno.args[0] ?? 300);
  const figures = await runEdgeSoak({
    minSeconds: seconds,
    minEnds: 30,
    maxSeconds: seconds * 2,
    runsPerSecond: 3,
    stormPerSecond: 12,
    log: (line) => console.error(`[edge soak ${new Date().toISOString().slice(11, 19)}] ${line}`),
  });
  console.log(JSON.stringify(figures, null, 2));
  Deno.exit(figures.problems.length === 0 ? 0 : 1);
}
