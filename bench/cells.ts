/**
 * The headline cells, each engine on tables in the same state: this engine's single-step plain
 * queue and 3-step chain, graphile-worker's single jobs and chained jobs, and the raw PGMQ floor.
 * Every cell measures a drain twice, each in a new database cloned from the run's template: on
 * the fresh tables, and on used ones (after {@link WARM_UP_TASKS} tasks have gone through that
 * database). Backlogs are sized from the cell's measured rate so that each
 * drain lasts about `drainSeconds`; each drain's server CPU is read around it (server_probe.ts).
 * After the used drain, the latency: pickup (single-step cells) or unloaded run latency (chains).
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
import { plainChain, plainFlow } from "./flows.ts";
import { dbNow, startBacklog, taskWindow, waitRunsCompleted } from "./load.ts";
import { GRAPHILE_VERSION, GraphileRunners } from "./peer_graphile.ts";
import { FloorConsumer, floorLatencies, sendFloorBacklog } from "./pgmq_floor.ts";
import { ServerProbe } from "./server_probe.ts";
import { percentile } from "./stats.ts";

/** Tasks that go through a cell's database before its "used" drain. */
export const WARM_UP_TASKS = 3000;

/** The five cells. */
export const CELLS = {
  engine: "this engine, plain queue (single-step)",
  engineChain: "this engine, 3-step chain",
  graphile: `graphile-worker ${GRAPHILE_VERSION}, single job`,
  graphileChain: `graphile-worker ${GRAPHILE_VERSION}, chained jobs a → b → c`,
  floor: "raw PGMQ loop (prepared, batch read, batch archive)",
} as const;
export type CellKey = keyof typeof CELLS;

/** A first guess of each cell's rate (units/s), replaced by measurements as they come. */
const GUESS: Record<CellKey, number> = {
  engine: 3000,
  engineChain: 500,
  graphile: 2500,
  graphileChain: 300,
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
  /** Puts `n` units in a backlog, in one commit. */
  backlog(n: number): Promise<void>;
  /** Waits until the backlog just added is done; the busy window in seconds. */
  drained(n: number): Promise<number>;
  /** Latency figures on the current tables. */
  latencies(): Promise<number[]>;
  stop(): Promise<void>;
}

async function engineDriver(
  s: EngineSettings,
  key: "engine" | "engineChain",
  load: CellLoad,
): Promise<Driver> {
  const chain = key === "engineChain";
  const slug = chain ? plainChain.slug : plainFlow.slug;
  const workers = await startWorkers(s, [{ target: chain ? plainChain : plainFlow }]);
  let since = "";
  return {
    tasksPerUnit: chain ? 3 : 1,
    backlog: async (n) => {
      since = await dbNow(s.sql);
      await startBacklog(s.sql, [slug], n);
    },
    drained: async (n) => {
      // A slow poll: the count is the monitor's work, not the engine's, and the window is read
      // from the tasks' own timestamps (first claim → last completion) anyway.
      await waitRunsCompleted(s.sql, [slug], since, n, 300_000, 250);
      return (await taskWindow(s.sql, [slug], since)).seconds;
    },
    latencies: () =>
      chain ? runLatencies(s, slug, load.chainPaced, load.chainRate) : pacedLatencies(s, [slug]),
    stop: () => stopWorkers(workers),
  };
}

async function graphileDriver(
  s: EngineSettings,
  key: "graphile" | "graphileChain",
  load: CellLoad,
): Promise<Driver> {
  const chain = key === "graphileChain";
  const peer = await GraphileRunners.start(s, chain ? "chain" : "single");
  let target = 0;
  return {
    tasksPerUnit: chain ? 3 : 1,
    backlog: (n) => {
      peer.resetWindow();
      target = peer.done + n;
      return peer.addJobs(s.sql, n);
    },
    drained: async () => {
      await peer.waitFor(target);
      return (peer.last - peer.first) / 1000;
    },
    latencies: () =>
      chain
        ? peer.paced(s.sql, load.chainPaced, load.chainRate)
        : peer.paced(s.sql, s.latencyTasks, s.rate),
    stop: () => peer.stop(),
  };
}

function floorDriver(s: EngineSettings): Promise<Driver> {
  const consumer = new FloorConsumer(s);
  consumer.start();
  let target = 0;
  return Promise.resolve({
    tasksPerUnit: 1,
    backlog: (n) => {
      consumer.resetWindow();
      target = consumer.archived + n;
      return sendFloorBacklog(s.sql, n);
    },
    drained: async () => {
      await consumer.waitFor(target);
      return (consumer.last - consumer.first) / 1000;
    },
    latencies: () => floorLatencies(s, consumer),
    stop: () => consumer.stop(),
  });
}

function driver(s: EngineSettings, key: CellKey, load: CellLoad): Promise<Driver> {
  switch (key) {
    case "engine":
    case "engineChain":
      return engineDriver(s, key, load);
    case "graphile":
    case "graphileChain":
      return graphileDriver(s, key, load);
    case "floor":
      return floorDriver(s);
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
    // One connection for producing and polling: the probe leaves its CPU out of the figures.
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    const probe = await ServerProbe.open(url, [pid]);
    const s: EngineSettings = { ...base, url, sql };
    let d: Driver | undefined;
    try {
      d = await driver(s, key, load);
      let tasksThrough = 0;
      const drain = async (): Promise<Drain> => {
        const units = rates.size(`${key}/${state}`, load.drainSeconds, GUESS[key], `${key}/fresh`);
        // The producer's connection is left out of the probe: the window's CPU is the drain's.
        await probe.start();
        await d!.backlog(units);
        const busy = await d!.drained(units);
        const { cpuMs } = await probe.stop();
        const tasks = units * d!.tasksPerUnit;
        tasksThrough += tasks;
        const perSec = units / busy;
        rates.note(`${key}/${state}`, perSec);
        log(
          `  ${state} tables: ${units} ${key.endsWith("Chain") ? "runs" : "tasks"} in ${
            busy.toFixed(1)
          } s`,
        );
        return {
          units,
          seconds: busy,
          perSec,
          tasksPerSec: tasks / busy,
          cpuMsPerTask: cpuMs / tasks,
        };
      };
      if (state === "fresh") {
        return {
          drain: await drain(),
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
      return {
        drain: used,
        tasksPerUnit: d.tasksPerUnit,
        warmedTasks,
        latencies: await d.latencies(),
      };
    } finally {
      await d?.stop();
      await probe.close();
      await sql.end({ timeout: 5 });
    }
  });
}
