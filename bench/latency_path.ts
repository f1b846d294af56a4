/**
 * `deno run -A bench/latency_path.ts [--runs N] [--gap-ms MS] [--fast] [--functions] [--base DIR]
 * [--no-commit-wait]`
 *
 * Where an unloaded task's time goes, phase by phase (issue 48: pickup and the unloaded 3-step
 * chain). One worker per flow (a single-step flow and a 3-step chain a → b → c, each on its own
 * queue), default settings, one run at a time: the single-step run and the chain run alternate,
 * each started only once the one before has finished and `--gap-ms` (default 30) has passed, so
 * the worker is idle at every start. Per task it records, on one clock:
 *
 * - the start call issued and returned (client), the sending transaction's `now()` (`queued_at`);
 * - the queue's notification received, on a LISTEN connection of the bench's own;
 * - the worker's read (`read_and_claim` / `complete_and_claim`) awaited and answered, by a proxy
 *   on the worker's pool that only timestamps; the claim transaction's `now()` (`started_at`);
 * - the handler's first and last line;
 * - the completion's `clock_timestamp()` (`completed_at`, before its commit) and the moment its
 *   call was answered (committed).
 *
 * Database times are put on the JavaScript clock by the measured offset (clock.ts). Prints the
 * median and the spread (p10–p90) of every phase, for pickup and for each hop of the chain.
 * `--base DIR` runs a second engine beside this one, from another checkout of the repository
 * (`git archive <commit> | tar -x -C DIR`), on the same database with flows of its own, the runs
 * of both interleaved: a before/after on one loaded machine. Its SQL is this checkout's (one
 * database), so it compares the TypeScript side. `--no-commit-wait` adds this engine with no
 * commit waiting for the disk (a bound: how much of each phase that wait is). `--functions` adds
 * the server's time by function (`track_functions`). Figures only; nothing here asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import * as engine from "../mod.ts";
import type { FlowWorker, Json, Sql, StepContext } from "../mod.ts";
import { clockOffsetMs, sleep, wallMs } from "./clock.ts";
import { fixed, percentile, textTable } from "./stats.ts";

function flag(name: string, fallback: number): number {
  const i = Deno.args.indexOf(`--${name}`);
  const value = i < 0 ? fallback : Number(Deno.args[i + 1]);
  if (!Number.isFinite(value) || value < 0) throw new Error(`--${name} needs a number ≥ 0`);
  return value;
}
const runs = flag("runs", 200);
const gapMs = flag("gap-ms", 30);
const fast = Deno.args.includes("--fast");
/** Also print where the server's time went by function (`track_functions = all`). */
const byFunction = Deno.args.includes("--functions");
const baseAt = Deno.args.indexOf("--base");
const baseDir = baseAt < 0 ? undefined : Deno.args[baseAt + 1];
/**
 * Also a third engine, this one with no commit waiting for the disk at all (its pool's sessions
 * set `synchronous_commit` off): a bound that shows how much of each phase is the wait for WAL,
 * not a setting the engine offers.
 */
const bound = Deno.args.includes("--no-commit-wait");

/** Wall-clock times of one task's events, by `run_id␟step_slug`. */
interface TaskTimes {
  readSent?: number;
  readAnswered?: number;
  handlerStart?: number;
  handlerEnd?: number;
  completionSent?: number;
  completionAnswered?: number;
}
const times = new Map<string, TaskTimes>();
const at = (runId: string, step: string): TaskTimes => {
  const key = `${runId}\u001f${step}`;
  let t = times.get(key);
  if (t === undefined) times.set(key, t = {});
  return t;
};
/** Runs whose last step's handler has returned (it may return before start_flow answers). */
const finished = new Set<string>();

function handler(last: boolean) {
  return (_input: unknown, context: StepContext<Json>): null => {
    const task = context.stepTask;
    const t = at(task.run_id, task.step_slug);
    t.handlerStart = wallMs();
    t.handlerEnd = wallMs();
    if (last) finished.add(task.run_id);
    return null;
  };
}

/** One engine under measurement: its module, and its two flows (slugs suffixed by `tag`). */
interface Variant {
  readonly name: string;
  readonly mod: typeof engine;
  /** Its pool's sessions commit without waiting for the disk (see `--no-commit-wait`). */
  readonly async?: boolean;
  readonly single: string;
  readonly chain: string;
}

function variant(name: string, mod: typeof engine, tag: string, async = false): Variant & {
  flows: unknown[];
} {
  const single = new mod.Flow<Json>({ slug: `path_single${tag}` })
    .step({ slug: "work" }, handler(true));
  const chain = new mod.Flow<Json>({ slug: `path_chain${tag}` })
    .step({ slug: "a" }, handler(false))
    .step({ slug: "b", dependsOn: ["a"] }, handler(false))
    .step({ slug: "c", dependsOn: ["b"] }, handler(true));
  return { name, mod, async, single: single.slug, chain: chain.slug, flows: [single, chain] };
}

/**
 * The worker's pool with every hot-path call timestamped: when it is awaited (postgres.js sends a
 * query then) and when its answer arrives. Only times are kept; rows are read for their identity.
 */
function tracedPool(mod: typeof engine, url: string, async: boolean): Sql {
  const pool = mod.createPool(url, {
    max: 4,
    prepare: true,
    // Passed through to postgres.js: the sessions' startup parameters.
    ...(async ? { connection: { synchronous_commit: "off" } } : {}),
  } as engine.PoolOptions);
  type Row = { disposition?: string; run_id?: string; step_slug?: string };
  return new Proxy(pool, {
    apply(fn, self, args) {
      const query = Reflect.apply(fn, self, args);
      const text = Array.isArray(args[0]) ? (args[0] as string[]).join("?") : "";
      const read = /pgflow\.(read_and_claim|complete_and_claim)\(/.test(text);
      const completes = /pgflow\.(complete_and_claim|complete_tasks)\(/.test(text);
      if (!read && !completes) return query;
      const then = query.then.bind(query);
      query.then = (ok: (v: unknown) => unknown, fail: (e: unknown) => unknown) => {
        const sent = wallMs();
        // The completions' run ids and step slugs: complete_tasks' first two parameters,
        // complete_and_claim's after the read's columns.
        const k = read ? 2 : 1;
        const done: [string, string][] = completes
          ? (args[k] as string[]).map((r, i) => [r, (args[k + 1] as string[])[i]])
          : [];
        for (const [r, s] of done) at(r, s).completionSent = sent;
        return then((rows: Row[]) => {
          const answered = wallMs();
          for (const [r, s] of done) at(r, s).completionAnswered = answered;
          if (read) {
            for (const row of rows) {
              if (row.disposition !== "claimed") continue;
              const t = at(row.run_id!, row.step_slug!);
              t.readSent = sent;
              t.readAnswered = answered;
            }
          }
          return ok(rows);
        }, fail);
      };
      return query;
    },
  }) as Sql;
}

const db = await openPgflowDatabase({ durable: !fast });
const sql = postgres(db.url, { max: 2, onnotice: () => {} });
const notified = new Map<string, number[]>();
const listener = postgres(db.url, { max: 1, onnotice: () => {} });
const workers: FlowWorker[] = [];
try {
  if (byFunction) {
    // Sessions opened from here on (the workers') count their functions' calls and times.
    await sql.unsafe(`alter database ${quote(new URL(db.url).pathname.slice(1))}
                      set track_functions = 'all'`);
  }
  const variants = [variant("this", engine, "")];
  if (bound) variants.push(variant("no commit wait", engine, "_async", true));
  if (baseDir !== undefined) {
    const url = new URL(`${baseDir.replace(/\/$/, "")}/mod.ts`, `file://${Deno.cwd()}/`);
    variants.push(variant("base", await import(url.href), "_base"));
  }
  for (const v of variants) {
    for (const flow of v.flows) {
      const slug = (flow as { slug: string }).slug;
      const worker = (v.mod.createWorker as (f: unknown, c: unknown) => FlowWorker)(flow, {
        sql: tracedPool(v.mod, db.url, v.async === true),
        functionName: "latency_path",
        logger: v.mod.createLogger({ level: "warn" }),
      });
      await worker.start();
      workers.push(worker);
      notified.set(slug, []);
      await listener.listen(`pgflow_queue:${slug}`, () => notified.get(slug)!.push(wallMs()));
    }
  }
  const variantOf = new Map(variants.flatMap((v) => [[v.single, v], [v.chain, v]]));
  const offsetMs = await clockOffsetMs(sql);
  const calls = new Map<string, { issued: number; returned: number; notifiedFrom: number }>();
  const startOne = async (slug: string) => {
    const issued = wallMs();
    const notifiedFrom = notified.get(slug)!.length;
    const [{ run_id }] = await sql<{ run_id: string }[]>`
      select run_id from pgflow.start_flow(${slug}, '{}'::jsonb)`;
    calls.set(run_id, { issued, returned: wallMs(), notifiedFrom });
    const deadline = wallMs() + 30_000;
    while (!finished.has(run_id)) {
      if (wallMs() > deadline) throw new Error(`run ${run_id} of ${slug} did not finish in 30 s`);
      await sleep(1);
    }
    // The last completion's answer comes after the handler; wait for it before the next start.
    await sleep(gapMs);
  };
  // Warm-up: prepared statements and plans, off the record.
  const round = async () => {
    for (const v of variants) await startOne(v.single);
    for (const v of variants) await startOne(v.chain);
  };
  for (let i = 0; i < 20; i++) await round();
  calls.clear();
  if (byFunction) await sql`select pg_stat_reset()`;
  for (let i = 0; i < runs; i++) await round();

  const rows = await sql<
    {
      run_id: string;
      flow_slug: string;
      step_slug: string;
      queued: number;
      started: number;
      completed: number;
      run_started: number;
      run_completed: number;
    }[]
  >`
    select t.run_id::text, t.flow_slug, t.step_slug,
           extract(epoch from t.queued_at)::float8 * 1000 as queued,
           extract(epoch from t.started_at)::float8 * 1000 as started,
           extract(epoch from t.completed_at)::float8 * 1000 as completed,
           extract(epoch from r.started_at)::float8 * 1000 as run_started,
           extract(epoch from r.completed_at)::float8 * 1000 as run_completed
    from pgflow.step_tasks t join pgflow.runs r using (run_id)
    where t.run_id = any (${[...calls.keys()]}::uuid[])`;

  // By phase, then by variant.
  const phases = new Map<string, Map<string, number[]>>();
  let current = "this";
  const note = (name: string, ms: number | undefined) => {
    if (ms === undefined || !Number.isFinite(ms)) return;
    let byVariant = phases.get(name);
    if (byVariant === undefined) phases.set(name, byVariant = new Map());
    let list = byVariant.get(current);
    if (list === undefined) byVariant.set(current, list = []);
    list.push(ms);
  };
  const byRun = Map.groupBy(rows, (r) => r.run_id);
  for (const [runId, tasks] of byRun) {
    const call = calls.get(runId)!;
    const flow = tasks[0].flow_slug;
    const v = variantOf.get(flow)!;
    current = v.name;
    const isSingle = flow === v.single;
    const db = (ms: number) => ms + offsetMs;
    const label = isSingle ? "pickup" : "chain";
    const steps = isSingle ? ["work"] : ["a", "b", "c"];
    const heard = notified.get(flow)!;
    let previousEnd: number | undefined;
    for (const [i, step] of steps.entries()) {
      const row = tasks.find((t) => t.step_slug === step)!;
      const t = at(runId, step);
      const p = isSingle ? "pickup" : `chain ${step}`;
      if (i === 0) {
        note(`${p}: start issued → start txn now()`, db(row.queued) - call.issued);
        note(`${p}: start txn now() → start answered`, call.returned - db(row.queued));
        const notifyAt = heard.find((n, k) => k >= call.notifiedFrom && n >= call.issued);
        note(`${p}: start answered → NOTIFY heard`, notifyAt! - call.returned);
        note(`${p}: NOTIFY heard → read sent`, t.readSent! - notifyAt!);
        note(
          `${p}: queued_at → handler start (the bench's pickup)`,
          t.handlerStart! - db(row.queued),
        );
      } else {
        note(`${p}: prev handler end → completion sent`, t.readSent! - previousEnd!);
        note(
          `${p}: prev completion now() → handler start`,
          t.handlerStart! - db(row.queued),
        );
      }
      note(`${p}: read sent → claim txn now()`, db(row.started) - t.readSent!);
      note(`${p}: claim txn now() → read answered`, t.readAnswered! - db(row.started));
      note(`${p}: read answered → handler start`, t.handlerStart! - t.readAnswered!);
      note(`${p}: handler start → end`, t.handlerEnd! - t.handlerStart!);
      note(`${p}: handler end → completion sent`, t.completionSent! - t.handlerEnd!);
      note(`${p}: completion sent → completed_at`, db(row.completed) - t.completionSent!);
      note(`${p}: completed_at → completion answered`, t.completionAnswered! - db(row.completed));
      previousEnd = t.handlerEnd;
    }
    const run = tasks[0];
    note(
      `${label}: run started_at → completed_at (the bench's run latency)`,
      run.run_completed - run.run_started,
    );
    note(
      `${label}: start issued → last completion answered`,
      at(runId, steps.at(-1)!).completionAnswered! - call.issued,
    );
  }
  const names = variants.map((v) => v.name);
  // Phases by task (pickup, chain a, b, c, the run), each task's in the order they happen.
  const group = (phase: string) => phase.slice(0, phase.indexOf(":"));
  const table: string[][] = [[
    "phase (ms)",
    ...names.flatMap((n) => [`${n} p50`, `${n} p10–p90`]),
  ]];
  for (
    const [name, byVariant] of [...phases].sort(([a], [b]) => group(a).localeCompare(group(b)))
  ) {
    table.push([
      name,
      ...names.flatMap((n) => {
        const list = byVariant.get(n) ?? [];
        return [
          fixed(percentile(list, 50), 2),
          `${fixed(percentile(list, 10), 2)}–${fixed(percentile(list, 90), 2)}`,
        ];
      }),
    ]);
  }
  console.log(
    `${runs} single-step runs and ${runs} 3-step runs per engine (${names.join(", ")}), ` +
      `interleaved, one at a time; ${fast ? "fast (fsync off)" : "durable"} server; ` +
      `clock offset ${fixed(offsetMs, 3)} ms`,
  );
  console.log(textTable(table));
  if (byFunction) await printFunctions();
} finally {
  for (const w of workers) await w.stop();
  await listener.end();
  await sql.end();
  await db.close();
}

function quote(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/** The functions the measured runs called, by total time (the workers' sessions only). */
async function printFunctions(): Promise<void> {
  // Statistics reach the views when a session reports them (at the latest when it ends).
  for (const w of workers.splice(0)) await w.stop();
  await sleep(1000);
  await sql`select pg_stat_clear_snapshot()`;
  const stats = await sql<{ name: string; calls: number; total: number; self: number }[]>`
    select schemaname || '.' || funcname as name, calls::int,
           total_time::float8 as total, self_time::float8 as self
    from pg_stat_user_functions order by total_time desc limit 25`;
  const table = [["function", "calls", "total ms/call", "self ms/call"]];
  for (const f of stats) {
    table.push([f.name, String(f.calls), fixed(f.total / f.calls, 3), fixed(f.self / f.calls, 3)]);
  }
  console.log(textTable(table));
}
