/**
 * The peer: graphile-worker on the same server (its own schema) running no-op jobs at the same
 * concurrency. Throughput drains a backlog added in one statement; latency is from `add_job`'s
 * `now()` (the job's run_at) to the task function's first line, on jobs added one by one. Chains
 * are jobs a → b → c, each job adding the next (`helpers.addJob`) before it completes.
 */
import type postgres from "postgres";
import { Logger, run, type Runner } from "graphile-worker";
import { sleep } from "./clock.ts";
import { wallMs } from "./clock.ts";
import type { EngineSettings } from "./engine.ts";

/** The graphile-worker version pinned in deno.json. */
export const GRAPHILE_VERSION = "0.16.6";

/** Single jobs (`noop`) or three-job chains (`a` adds `b` adds `c`). */
export type GraphileShape = "single" | "chain";

/**
 * `runners` graphile-worker runners on `s.url` (as many worker processes would run), each at the
 * benchmark's concurrency. Counts units done: jobs (single) or finished chains (chain).
 *
 * @example
 * ```ts
 * const peer = await GraphileRunners.start(s, "single");
 * await peer.addJobs(s.sql, 1000);
 * await peer.waitFor(1000);
 * await peer.stop();
 * ```
 */
export class GraphileRunners {
  readonly shape: GraphileShape;
  readonly #running: Runner[];
  /** Units done so far. */
  done = 0;
  /** Wall ms of the first unit started and of the last unit finished, since resetWindow(). */
  first = NaN;
  last = NaN;
  /** When set, each unit's latency (ms from run_at of its first job) is pushed here. */
  latencies: number[] | undefined;

  private constructor(shape: GraphileShape, running: Runner[]) {
    this.shape = shape;
    this.#running = running;
  }

  /** Starts the runners. */
  static async start(
    s: EngineSettings,
    shape: GraphileShape,
    runners = 1,
  ): Promise<GraphileRunners> {
    const running: Runner[] = [];
    const self = new GraphileRunners(shape, running);
    const begin = () => {
      if (Number.isNaN(self.first)) self.first = wallMs();
    };
    const finish = (from: number) => {
      self.latencies?.push(wallMs() - from);
    };
    const taskList = shape === "single"
      ? {
        noop: (_payload: unknown, helpers: { job: { run_at: Date } }) => {
          const at = wallMs();
          begin();
          // Pickup: from the job's run_at to the function's first line.
          self.latencies?.push(at - (helpers.job.run_at.getTime() + s.offsetMs));
          return Promise.resolve();
        },
      }
      : {
        a: async (
          _payload: unknown,
          helpers: { job: { run_at: Date }; addJob: (t: string, p: unknown) => Promise<unknown> },
        ) => {
          begin();
          await helpers.addJob("b", { at: helpers.job.run_at.getTime() + s.offsetMs });
        },
        b: async (
          payload: unknown,
          helpers: { addJob: (t: string, p: unknown) => Promise<unknown> },
        ) => {
          await helpers.addJob("c", payload);
        },
        c: (payload: unknown) => {
          finish((payload as { at: number }).at);
          return Promise.resolve();
        },
      };
    for (let i = 0; i < runners; i++) {
      running.push(
        await run({
          connectionString: s.url,
          concurrency: s.maxConcurrent,
          noHandleSignals: true,
          // Its own default; LISTEN/NOTIFY wakes it on new jobs, the poll is only a fallback.
          pollInterval: 2000,
          logger: new Logger(() => () => {}),
          // deno-lint-ignore no-explicit-any
          taskList: taskList as any,
        }),
      );
    }
    // A unit is done, and the window ends, when its last job is completed (committed), not when
    // its function returns: the engine's window ends at its completing transaction too.
    const lastJob = shape === "single" ? "noop" : "c";
    for (const r of running) {
      r.events.on("job:complete", ({ job }) => {
        if (job.task_identifier !== lastJob) return;
        self.last = wallMs();
        self.done++;
      });
    }
    return self;
  }

  /**
   * Adds `n` units (jobs, or chains' first jobs) in one statement with graphile-worker's batch
   * `add_jobs` (the same rows as `add_job` one by one, at a fraction of the producer's time).
   */
  async addJobs(sql: postgres.Sql, n: number): Promise<void> {
    const task = this.shape === "single" ? "noop" : "a";
    await sql`
      select count(*) from graphile_worker.add_jobs(array(
        select row(${task}, '{}'::json, null, null, null, null, null, null)::graphile_worker.job_spec
        from generate_series(1, ${n}::integer)))`;
  }

  /** Adds one unit (its own transaction). */
  async addOne(sql: postgres.Sql): Promise<void> {
    await sql`select graphile_worker.add_job(${
      this.shape === "single" ? "noop" : "a"
    }, '{}'::json)`;
  }

  /** Forgets the window, before a new backlog. */
  resetWindow(): void {
    this.first = this.last = NaN;
  }

  /** Resolves once `n` units in all are done. */
  async waitFor(n: number, timeoutMs = 300_000): Promise<void> {
    const deadline = wallMs() + timeoutMs;
    while (this.done < n) {
      if (wallMs() > deadline) {
        throw new Error(`graphile-worker (${this.shape}) finished ${this.done} of ${n}`);
      }
      await sleep(10);
    }
  }

  /** Latencies of `count` units started one by one at `rate` per second. */
  async paced(sql: postgres.Sql, count: number, rate: number): Promise<number[]> {
    const before = this.done;
    this.latencies = [];
    const t0 = wallMs();
    for (let i = 0; i < count; i++) {
      const wait = t0 + (i * 1000) / rate - wallMs();
      if (wait > 0) await sleep(wait);
      await this.addOne(sql);
    }
    await this.waitFor(before + count);
    const out = this.latencies;
    this.latencies = undefined;
    return out;
  }

  /** Stops every runner. */
  async stop(): Promise<void> {
    await Promise.all(this.#running.map((r) => r.stop()));
  }
}
