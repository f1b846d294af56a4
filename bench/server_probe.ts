/**
 * What a drain costs the server, measured from outside the engines: the CPU time of every
 * Postgres process (read from /proc, so only for a server on this machine) and, sampled every
 * ~10 ms on a connection of its own, how many active backends wait on the server-wide lock that
 * serialises committing transactions which sent a NOTIFY (`AccessExclusiveLock` on
 * `object pg_database objid=0`, taken in `PreCommit_Notify`).
 */
import postgres from "postgres";
import { sleep } from "./clock.ts";

/** CPU times of one process, in clock ticks. */
interface ProcTimes {
  readonly ppid: number;
  /** utime + stime + cutime + cstime: its own and its reaped children's. */
  readonly ticks: number;
}

/** The clock ticks per second of /proc/<pid>/stat (USER_HZ; 100 on every Linux in practice). */
const TICKS_PER_SECOND = 100;

/** Parses /proc/<pid>/stat; `undefined` when the process is gone or the file unreadable. */
export function parseStat(text: string): ProcTimes | undefined {
  // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
  const rest = text.slice(text.lastIndexOf(")") + 2).split(" ");
  if (rest.length < 15) return undefined;
  const n = (i: number) => Number(rest[i]);
  // rest[0] is field 3 (state): ppid is field 4, utime..cstime fields 14..17.
  return { ppid: n(1), ticks: n(11) + n(12) + n(13) + n(14) };
}

async function readStat(pid: number): Promise<ProcTimes | undefined> {
  try {
    return parseStat(await Deno.readTextFile(`/proc/${pid}/stat`));
  } catch {
    return undefined;
  }
}

/**
 * Milliseconds of CPU the whole server has used: the postmaster (whose cutime/cstime hold every
 * backend that has exited and been reaped) plus every live child, minus the `excluded` pids
 * (the probe's own connections).
 */
async function serverCpuMs(postmaster: number, excluded: readonly number[]): Promise<number> {
  const root = await readStat(postmaster);
  if (root === undefined) return NaN;
  let ticks = root.ticks;
  for await (const entry of Deno.readDir("/proc")) {
    const pid = Number(entry.name);
    if (!Number.isInteger(pid) || pid === postmaster || excluded.includes(pid)) continue;
    const stat = await readStat(pid);
    if (stat?.ppid === postmaster) ticks += stat.ticks;
  }
  return (ticks * 1000) / TICKS_PER_SECOND;
}

/** What one probed window measured. */
export interface ProbeResult {
  /** Server CPU over the window, ms (NaN when the server is not on this machine). */
  readonly cpuMs: number;
  /** CPU of the producers' backends over the window, ms (see `producers()`). */
  readonly producersCpuMs: number;
  /** Samples taken. */
  readonly samples: number;
  /** Σ active client backends over the samples (the probe's connections excluded). */
  readonly active: number;
  /** Σ of those waiting (pg_locks, not granted) on the NOTIFY lock. */
  readonly notifyWaiting: number;
  /** Σ of those whose pg_stat_activity wait event is Lock/object (the same lock, cross-check). */
  readonly objectWaitEvents: number;
}

/** The NOTIFY-lock waits as a share of active backends (0..1; NaN with no active sample). */
export function notifyWaitShare(r: ProbeResult): number {
  return r.active > 0 ? r.notifyWaiting / r.active : NaN;
}

/**
 * Measures the server around a window: `start()` before the work, `stop()` after; one probe can
 * measure many windows in turn. `close()` ends its connection.
 *
 * @example
 * ```ts
 * const probe = await ServerProbe.open(url);
 * await probe.start();
 * // ... drain a backlog ...
 * const { cpuMs } = await probe.stop();
 * await probe.close();
 * ```
 */
export class ServerProbe {
  readonly #sql: postgres.Sql;
  readonly #postmaster: number | undefined;
  readonly #excluded: number[];
  readonly #producers: number[] = [];
  #producersAtStart = NaN;
  #cpuAtStart = NaN;
  #sampling: Promise<void> | undefined;
  #stopped = false;
  #samples = 0;
  #active = 0;
  #notifyWaiting = 0;
  #objectWaits = 0;

  private constructor(sql: postgres.Sql, postmaster: number | undefined, excluded: number[]) {
    this.#sql = sql;
    this.#postmaster = postmaster;
    this.#excluded = excluded;
  }

  /**
   * Opens the sampling connection to `url`; `alsoExclude` are backend pids of other measuring
   * connections (e.g. one polling for completion) whose CPU and activity are not the engine's.
   */
  static async open(url: string, alsoExclude: readonly number[] = []): Promise<ServerProbe> {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    const [{ pid }] = await sql<{ pid: number }[]>`select pg_backend_pid() as pid`;
    // Only a server on this machine shows its processes (a remote one gives CPU as NaN); a local
    // process that happens to have the remote backend's pid is not taken for it.
    const backend = await readStat(pid);
    const comm = await Deno.readTextFile(`/proc/${pid}/comm`).catch(() => "");
    const postmaster = backend && comm.startsWith("postgres") ? backend.ppid : undefined;
    return new ServerProbe(sql, postmaster, [pid, ...alsoExclude]);
  }

  /**
   * Leaves the backends `pids` (connections that produce the work) out of the server's figures
   * from now on, and measures their CPU apart (`producersCpuMs`).
   */
  producers(pids: readonly number[]): void {
    this.#excluded.push(...pids);
    this.#producers.push(...pids);
  }

  /** Starts a window: reads the CPU counters and starts sampling the lock. */
  async start(): Promise<void> {
    this.#samples =
      this.#active =
      this.#notifyWaiting =
      this.#objectWaits =
        0;
    this.#stopped = false;
    this.#cpuAtStart = this.#postmaster === undefined
      ? NaN
      : await serverCpuMs(this.#postmaster, this.#excluded);
    this.#producersAtStart = await this.#producersCpuMs();
    this.#sampling = this.#sample();
  }

  async #sample(): Promise<void> {
    while (!this.#stopped) {
      const t0 = performance.now();
      const [row] = await this.#sql<
        { active: number; notify: number; object: number }[]
      >`
        select count(*)::int as active,
               count(*) filter (where exists (
                 select 1 from pg_locks l
                 where l.pid = a.pid and l.locktype = 'object'
                   and l.classid = 'pg_database'::regclass and l.objid = 0 and not l.granted
               ))::int as notify,
               count(*) filter (where a.wait_event_type = 'Lock'
                                  and a.wait_event = 'object')::int as object
        from pg_stat_activity a
        where a.backend_type = 'client backend' and a.state = 'active'
          and a.pid <> all (${this.#excluded}::int[])`;
      this.#samples++;
      this.#active += row.active;
      this.#notifyWaiting += row.notify;
      this.#objectWaits += row.object;
      const wait = 10 - (performance.now() - t0);
      if (wait > 0) await sleep(wait);
    }
  }

  /** CPU ms of the producers' backends so far (NaN for a server not on this machine). */
  async #producersCpuMs(): Promise<number> {
    if (this.#postmaster === undefined) return NaN;
    let ticks = 0;
    for (const pid of this.#producers) ticks += (await readStat(pid))?.ticks ?? 0;
    return (ticks * 1000) / TICKS_PER_SECOND;
  }

  /** Ends the window. */
  async stop(): Promise<ProbeResult> {
    this.#stopped = true;
    await this.#sampling;
    const cpu = this.#postmaster === undefined
      ? NaN
      : await serverCpuMs(this.#postmaster, this.#excluded);
    return {
      cpuMs: cpu - this.#cpuAtStart,
      producersCpuMs: await this.#producersCpuMs() - this.#producersAtStart,
      samples: this.#samples,
      active: this.#active,
      notifyWaiting: this.#notifyWaiting,
      objectWaitEvents: this.#objectWaits,
    };
  }

  /** Closes the sampling connection. */
  async close(): Promise<void> {
    this.#stopped = true;
    await this.#sampling?.catch(() => {});
    await this.#sql.end({ timeout: 5 });
  }
}
