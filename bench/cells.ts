/**
 * The headline cells, each engine on tables in the same state: this engine's single-step plain
 * queue and 3-step chain (with the bench's settings, and through the public API at its defaults),
 * the peers (graphile-worker 0.18, pg-boss, DBOS Transact queued and started directly; each a Node
 * process of its own, peer_process.ts), and the raw PGMQ floor.
 * Every cell measures a drain twice, each in a new database cloned from the run's template: on
 * the fresh tables, and on used ones (after {@link WARM_UP_TASKS} tasks have gone through that
 * database). Backlogs are sized from the cell's measured rate so that each
 * drain lasts about `drainSeconds`; each drain's server CPU is read around it (server_probe.ts).
 * After the used drain, the latency: pickup (single-step cells) or unloaded run latency (chains).
 * Each database ends with the exactly-once check (exactly_once.ts).
 */
import postgres from "postgres";
import { type Template, withFreshDatabase } from "./databases.ts";
import {
  type EngineSettings,
  pacedLatencies,
  runLatencies,
  startWorkers,
  stopWorkers,
} from "./engine.ts";
import { checkExactlyOnce, type OwnRecord, writeLedger } from "./exactly_once.ts";
import { defaultsFlow, handlerRuns, plainChain, plainFlow } from "./flows.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { GRAPHILE_VERSION, GraphileRunners } from "./peer_graphile.ts";
import { type PeerName, PeerProcess, peerVersion } from "./peer_process.ts";
import { FLOOR_QUEUE, FloorConsumer, floorLatencies, sendFloorBacklog } from "./pgmq_floor.ts";
import { ServerProbe } from "./server_probe.ts";
import { percentile } from "./stats.ts";
import { createLogger, createWorker } from "../mod.ts";

/** Tasks that go through a cell's database before its "used" drain. */
export const WARM_UP_TASKS = 3000;

const GRAPHILE = peerVersion("graphile", "graphile-worker");
const PGBOSS = peerVersion("pgboss", "pg-boss");
const DBOS = peerVersion("dbos", "@dbos-inc/dbos-sdk");

/** The cells. */
export const CELLS = {
  engine: "this engine, plain queue (single-step)",
  engineChain: "this engine, 3-step chain",
  engineDefaults: "this engine, public API at its defaults (single-step)",
  graphile: `graphile-worker ${GRAPHILE}, single job`,
  graphileChain: `graphile-worker ${GRAPHILE}, chained jobs a → b → c`,
  pgboss: `pg-boss ${PGBOSS}, single job`,
  pgbossChain: `pg-boss ${PGBOSS}, chained jobs a → b → c`,
  dbosQueued: `DBOS ${DBOS} queued, 1-step workflow`,
  dbosQueuedChain: `DBOS ${DBOS} queued, 3-step workflow`,
  dbosDirect: `DBOS ${DBOS} started directly, 1-step workflow`,
  dbosDirectChain: `DBOS ${DBOS} started directly, 3-step workflow`,
  graphileDeno: `graphile-worker ${GRAPHILE_VERSION} in Deno, single job`,
  floor: "raw PGMQ loop (prepared, batch read, batch archive)",
} as const;
export type CellKey = keyof typeof CELLS;

/**
 * The cells run unless `--cells` says otherwise: all but graphile-worker 0.16.6 inside Deno, kept
 * for the comparison with the figures of earlier rounds.
 */
export const DEFAULT_CELLS: readonly CellKey[] = (Object.keys(CELLS) as CellKey[])
  .filter((k) => k !== "graphileDeno");

/** The peers' cells: which program, which shape, which mode, and its own record. */
const PEER_CELLS: Partial<
  Record<CellKey, { peer: PeerName; shape: "single" | "chain"; mode?: string; own: OwnRecord }>
> = {
  graphile: { peer: "graphile", shape: "single", own: "graphile" },
  graphileChain: { peer: "graphile", shape: "chain", own: "graphile" },
  pgboss: { peer: "pgboss", shape: "single", own: "pgboss" },
  pgbossChain: { peer: "pgboss", shape: "chain", own: "pgboss" },
  dbosQueued: { peer: "dbos", shape: "single", mode: "queued", own: "dbos" },
  dbosQueuedChain: { peer: "dbos", shape: "chain", mode: "queued", own: "dbos" },
  dbosDirect: { peer: "dbos", shape: "single", mode: "direct", own: "dbos" },
  dbosDirectChain: { peer: "dbos", shape: "chain", mode: "direct", own: "dbos" },
};

/** A first guess of each cell's rate (units/s), replaced by measurements as they come. */
const GUESS: Record<CellKey, number> = {
  engine: 3000,
  engineChain: 500,
  engineDefaults: 3000,
  graphile: 2500,
  graphileChain: 300,
  pgboss: 1500,
  pgbossChain: 300,
  dbosQueued: 150,
  dbosQueuedChain: 100,
  dbosDirect: 300,
  dbosDirectChain: 150,
  graphileDeno: 2500,
  floor: 10_000,
};

/** Table state of a drain. */
export type TableState = "fresh" | "used";

/** One drain of a cell. */
export interface Drain {
  /** Units drained: tasks (single-step, floor) or runs (chains). */
  readonly units: number;
  readonly seconds: number;
  /** Units per second. */
  readonly perSec: number;
  /** Tasks (jobs, messages) per second. */
  readonly tasksPerSec: number;
  /** Server CPU ms per task over the drain. */
  readonly cpuMsPerTask: number;
  /** Server CPU ms per task of the connections that started the backlog (not in `cpuMsPerTask`). */
  readonly startCpuMsPerTask: number;
  /** Seconds the bench waited for the backlog to be started (committed). */
  readonly startSeconds: number;
  /**
   * Units per second counting the start too (units ÷ (start + drain)): what a harness that times
   * from issuing the start to the last completion measures.
   */
  readonly withStartPerSec: number;
}

/** One round of a cell. */
export interface CellResult {
  readonly key: CellKey;
  readonly name: string;
  /** Tasks per unit: 1, or 3 for chains. */
  readonly tasksPerUnit: number;
  readonly fresh: Drain;
  readonly used: Drain;
  /** Latency on the used tables: pickup (single-step, floor: send → read) or run (chains). */
  readonly p50: number;
  readonly p95: number;
  /** Tasks through the database before the used drain. */
  readonly warmedTasks: number;
}

/** What a cell needs besides the run's settings. */
export interface CellLoad {
  readonly drainSeconds: number;
  /** Chain runs started one by one for the run latency, and how many per second. */
  readonly chainPaced: number;
  readonly chainRate: number;
  /** DBOS queued: the queue's minPollingIntervalMs (DBOS's default is 1000). */
  readonly dbosPollMs: number;
}

/** Measured rates (units/s) by name, so that each drain is sized to last at least its seconds. */
export class Rates {
  readonly #rates = new Map<string, number>();

  /**
   * Units to put in a backlog for a drain of `seconds`: from `key`'s last rate, else `fallback`'s,
   * else `guess`, with {@link MARGIN} to spare, since rates move between rounds on a shared machine.
   */
  size(key: string, seconds: number, guess: number, fallback?: string): number {
    const rate = this.#rates.get(key) ??
      (fallback === undefined ? undefined : this.#rates.get(fallback)) ?? guess;
    return Math.max(100, Math.round(rate * seconds * MARGIN));
  }

  /** Whether a rate of `key` was measured. */
  has(key: string): boolean {
    return this.#rates.has(key);
  }

  /**
   * Records a measured rate (units/s); the last one counts. A drain on fresh tables slows as its
   * backlog grows (no statistics yet), so a short drain's rate overstates a long one's: the last
   * full-length drain is the best guess for the next.
   */
  note(key: string, perSec: number): void {
    if (Number.isFinite(perSec) && perSec > 0) this.#rates.set(key, perSec);
  }
}

/** Backlogs are sized for this many times the asked seconds at the last rate. */
export const MARGIN = 1.25;

/** How one engine is driven inside a cell. */
interface Driver {
  readonly tasksPerUnit: number;
  /** Backend pids of connections that produce work (their server CPU is not the drain's). */
  readonly producers: readonly number[];
  /** Puts `n` units in a backlog, in one commit. */
  backlog(n: number): Promise<void>;
  /** Waits until the backlog just added is done; the busy window in seconds. */
  drained(n: number): Promise<number>;
  /** Latency figures on the current tables. */
  latencies(): Promise<number[]>;
  /** Throws unless every unit started ran each step exactly once (exactly_once.ts). */
  check(): Promise<void>;
  stop(): Promise<void>;
}

/** The engine's single-step or chain cell, with the bench's worker settings. */
async function engineDriver(
  s: EngineSettings,
  key: "engine" | "engineChain",
  load: CellLoad,
): Promise<Driver> {
  const chain = key === "engineChain";
  const slug = chain ? plainChain.slug : plainFlow.slug;
  handlerRuns.clear();
  const workers = await startWorkers(s, [{ target: chain ? plainChain : plainFlow }]);
  return {
    ...engineLoad(s, slug, chain ? 3 : 1, key, load),
    stop: () => stopWorkers(workers),
  };
}

/**
 * The single-step cell as an outsider runs it: the public `createWorker` with nothing but the
 * connection and a logger at the default level (info) writing to an in-process sink, and the
 * flow compiled by the worker as it starts (it is not in the template).
 */
async function defaultsDriver(s: EngineSettings, load: CellLoad): Promise<Driver> {
  handlerRuns.clear();
  let logged = 0;
  const worker = createWorker(defaultsFlow, {
    connectionString: s.url,
    logger: createLogger({ sink: () => logged++ }),
  });
  await worker.start();
  return {
    ...engineLoad(s, defaultsFlow.slug, 1, "engineDefaults", load),
    stop: () => worker.stop(),
  };
}

/** The engine's backlog, drain, latency and check on the runs of `slug`. */
function engineLoad(
  s: EngineSettings,
  slug: string,
  tasksPerUnit: number,
  key: CellKey,
  load: CellLoad,
): Omit<Driver, "stop"> {
  let since = "";
  return {
    tasksPerUnit,
    producers: [],
    backlog: async (n) => {
      since = await dbNow(s.sql);
      await startBacklog(s.sql, [slug], n);
    },
    drained: async (n) => {
      // A slow poll on the watching connection: the count is the bench's work, not the
      // engine's, and the window is read from the tasks' own timestamps (first claim → last
      // completion) anyway.
      const watch = s.watch ?? s.sql;
      await waitRunsCompleted(watch, [slug], since, n, 300_000, 250);
      return (await taskWindow(watch, [slug], since)).seconds;
    },
    latencies: () =>
      tasksPerUnit > 1
        ? runLatencies(s, slug, load.chainPaced, load.chainRate)
        : pacedLatencies(s, [slug]),
    check: async () => {
      await writeLedger(s.sql, handlerRuns);
      await checkExactlyOnce(s.sql, CELLS[key], "engine", tasksPerUnit);
    },
  };
}

/** A peer's cell: its program in a Node process of its own. */
async function peerDriver(
  s: EngineSettings,
  key: CellKey,
  load: CellLoad,
  log: (text: string) => void,
): Promise<Driver> {
  const spec = PEER_CELLS[key]!;
  const chain = spec.shape === "chain";
  const peer = await PeerProcess.start(spec.peer, {
    url: s.url,
    shape: spec.shape,
    concurrency: s.maxConcurrent,
    mode: spec.mode,
    pollMs: load.dbosPollMs,
  }, log);
  // Units are numbered across the whole database, so the ledger tells every one apart.
  let started = 0;
  return {
    tasksPerUnit: chain ? 3 : 1,
    producers: [peer.producerPid],
    backlog: async (n) => {
      await peer.call("backlog", { from: started, n });
      started += n;
    },
    drained: async () => {
      const w = await peer.call("wait", { until: started });
      return (Number(w.last) - Number(w.first)) / 1000;
    },
    latencies: async () => {
      const count = chain ? load.chainPaced : s.latencyTasks;
      const rate = chain ? load.chainRate : s.rate;
      const answer = await peer.call("paced", { from: started, count, rate });
      started += count;
      return answer.latencies as number[];
    },
    check: async () => {
      await peer.call("ledger");
      await checkExactlyOnce(s.sql, CELLS[key], spec.own, chain ? 3 : 1, started);
    },
    stop: () => peer.stop(),
  };
}

/**
 * graphile-worker 0.16.6 in the bench's own Deno process, as earlier rounds ran it. Its jobs
 * carry no unit, so its check is weaker than the others': every job done once by count, and
 * none left.
 */
async function graphileDenoDriver(s: EngineSettings): Promise<Driver> {
  const peer = await GraphileRunners.start(s, "single");
  let target = 0;
  return {
    tasksPerUnit: 1,
    producers: [],
    backlog: (n) => {
      peer.resetWindow();
      target = peer.done + n;
      return peer.addJobs(s.sql, n);
    },
    drained: async () => {
      await peer.waitFor(target);
      return (peer.last - peer.first) / 1000;
    },
    latencies: async () => {
      const out = await peer.paced(s.sql, s.latencyTasks, s.rate);
      target += s.latencyTasks;
      return out;
    },
    check: async () => {
      const [{ left }] = await s.sql<{ left: number }[]>`
        select count(*)::int as left from graphile_worker.jobs`;
      if (left !== 0 || peer.done !== target) {
        throw new Error(
          `exactly-once check of "${CELLS.graphileDeno}" failed: ${peer.done} jobs completed ` +
            `of ${target} added, ${left} left`,
        );
      }
    },
    stop: () => peer.stop(),
  };
}

function floorDriver(s: EngineSettings): Promise<Driver> {
  const consumer = new FloorConsumer(s);
  consumer.start();
  let target = 0;
  return Promise.resolve({
    tasksPerUnit: 1,
    producers: [],
    backlog: (n) => {
      consumer.resetWindow();
      target = consumer.archived + n;
      return sendFloorBacklog(s.sql, n);
    },
    drained: async () => {
      await consumer.waitFor(target);
      return (consumer.last - consumer.first) / 1000;
    },
    latencies: async () => {
      const out = await floorLatencies(s, consumer);
      target += s.latencyTasks;
      return out;
    },
    check: async () => {
      // Raw PGMQ keeps its own record: each message archived once, after being read once.
      const [{ archived, once, left }] = await s.sql<
        { archived: number; once: number; left: number }[]
      >`select (select count(*) from pgmq.${s.sql(`a_${FLOOR_QUEUE}`)})::int as archived,
               (select count(*) from pgmq.${s.sql(`a_${FLOOR_QUEUE}`)}
                where read_ct = 1)::int as once,
               (select count(*) from pgmq.${s.sql(`q_${FLOOR_QUEUE}`)})::int as left`;
      if (archived !== target || once !== archived || left !== 0) {
        throw new Error(
          `exactly-once check of "${CELLS.floor}" failed: ${archived} archived of ${target} ` +
            `sent, ${archived - once} read more than once, ${left} left`,
        );
      }
    },
    stop: () => consumer.stop(),
  });
}

function driver(
  s: EngineSettings,
  key: CellKey,
  load: CellLoad,
  log: (text: string) => void,
): Promise<Driver> {
  switch (key) {
    case "engine":
    case "engineChain":
      return engineDriver(s, key, load);
    case "engineDefaults":
      return defaultsDriver(s, load);
    case "graphileDeno":
      return graphileDenoDriver(s);
    case "floor":
      return floorDriver(s);
    default:
      return peerDriver(s, key, load, log);
  }
}

/**
 * One round of cell `key`: the fresh drain in a new database, then, in another new database, a
 * warm-up of {@link WARM_UP_TASKS} tasks, the used drain and the latency. (The fresh drain is not
 * the warm-up: a 10-s backlog drained through unvacuumed tables leaves them in a state no running
 * project is in — graphile-worker then ran 5× slower, at 3 ms of server CPU per job.)
 * A drain that ends before {@link SHORT} × `drainSeconds` (its backlog was sized from a guess or a
 * rate that has since changed) does not count: a used drain is run again, resized, on the same
 * tables; a fresh one needs fresh tables, so it is run again in another new database. Once per
 * drain: the second is kept whatever its length, and the table shows the shortest.
 */
export async function runCell(
  base: EngineSettings,
  template: Template,
  key: CellKey,
  load: CellLoad,
  rates: Rates,
  log: (text: string) => void = () => {},
): Promise<CellResult> {
  let fresh = await inCell(base, template, key, load, rates, log, "fresh");
  if (short(fresh.drain, load)) {
    log(`  fresh drain shorter than ${load.drainSeconds} s: again, resized, in a new database`);
    fresh = await inCell(base, template, key, load, rates, log, "fresh");
  }
  const used = await inCell(base, template, key, load, rates, log, "used");
  const ms = used.latencies;
  return {
    key,
    name: CELLS[key],
    tasksPerUnit: fresh.tasksPerUnit,
    fresh: fresh.drain,
    used: used.drain,
    p50: percentile(ms, 50),
    p95: percentile(ms, 95),
    warmedTasks: used.warmedTasks,
  };
}

/** Below this share of the asked seconds, a drain is run again (once). */
export const SHORT = 1.0;

function short(d: Drain, load: CellLoad): boolean {
  return d.seconds < SHORT * load.drainSeconds;
}

/** One database's part of a cell. */
interface InCell {
  readonly drain: Drain;
  readonly tasksPerUnit: number;
  readonly warmedTasks: number;
  readonly latencies: number[];
}

async function inCell(
  base: EngineSettings,
  template: Template,
  key: CellKey,
  load: CellLoad,
  rates: Rates,
  log: (text: string) => void,
  state: TableState,
): Promise<InCell> {
  return await withFreshDatabase(template, async (url) => {
    // One connection producing work (its server CPU measured apart), one watching for the
    // drain's end (left out of the figures).
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const watch = postgres(url, { max: 1, onnotice: () => {} });
    const pid = async (c: postgres.Sql) =>
      (await c<{ pid: number }[]>`select pg_backend_pid() as pid`)[0].pid;
    const probe = await ServerProbe.open(url, [await pid(watch)]);
    probe.producers([await pid(sql)]);
    const s: EngineSettings = { ...base, url, sql, watch };
    let d: Driver | undefined;
    try {
      d = await driver(s, key, load, log);
      probe.producers(d.producers);
      let tasksThrough = 0;
      const drain = async (): Promise<Drain> => {
        const units = rates.size(`${key}/${state}`, load.drainSeconds, GUESS[key], `${key}/fresh`);
        // The producer's connection is left out of the probe: the window's CPU is the drain's.
        await probe.start();
        const t0 = performance.now();
        await d!.backlog(units);
        const startSeconds = (performance.now() - t0) / 1000;
        const busy = await d!.drained(units);
        const { cpuMs, producersCpuMs } = await probe.stop();
        const tasks = units * d!.tasksPerUnit;
        tasksThrough += tasks;
        const perSec = units / busy;
        rates.note(`${key}/${state}`, perSec);
        log(
          `  ${state} tables: ${units} ${d!.tasksPerUnit > 1 ? "runs" : "tasks"} in ${
            busy.toFixed(1)
          } s`,
        );
        return {
          units,
          seconds: busy,
          perSec,
          tasksPerSec: tasks / busy,
          cpuMsPerTask: cpuMs / tasks,
          startCpuMsPerTask: producersCpuMs / tasks,
          startSeconds,
          withStartPerSec: units / (startSeconds + busy),
        };
      };
      if (state === "fresh") {
        const fresh = await drain();
        await d.check();
        return {
          drain: fresh,
          tasksPerUnit: d.tasksPerUnit,
          warmedTasks: 0,
          latencies: [],
        };
      }
      const warm = Math.ceil(WARM_UP_TASKS / d.tasksPerUnit);
      await d.backlog(warm);
      await d.drained(warm);
      tasksThrough += warm * d.tasksPerUnit;
      let warmedTasks = tasksThrough;
      let used = await drain();
      if (short(used, load)) {
        log(`  used drain shorter than ${load.drainSeconds} s: again, resized`);
        warmedTasks = tasksThrough;
        used = await drain();
      }
      const latencies = await d.latencies();
      await d.check();
      return { drain: used, tasksPerUnit: d.tasksPerUnit, warmedTasks, latencies };
    } finally {
      await d?.stop();
      await probe.close();
      await sql.end({ timeout: 5 });
      await watch.end({ timeout: 5 });
    }
  });
}
