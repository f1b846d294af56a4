/**
 * A stand-in for the Supabase Edge runtime's supervisor, for tests: it runs each function as the
 * platform does, one isolate (here: one `deno run` process, with `isolate_preload.ts`) per start,
 * reached through a gateway (`POST /functions/v1/<name>`), and enforces the isolate limits from
 * outside:
 *
 * | limit | what happens |
 * |---|---|
 * | wall clock (`wallClockMs`) | `beforeunload` (`WallClockTime`) `unloadNoticeMs` before it; at it, killed |
 * | CPU soft (`cpuSoftMs`) | `beforeunload` (`CPUTime`) |
 * | CPU hard (`cpuHardMs`) | killed; set within 50 ms of the soft limit, the isolate keeps burning CPU after `beforeunload` (code that ignores it), so it is killed rather than drained |
 * | memory (`memoryMb`, resident) | `beforeunload` (`Memory`); killed `graceMs` later if still running |
 * | early drop | no request in flight and no pending `waitUntil` promise: `beforeunload` (`EarlyDrop`), then the end |
 *
 * After `beforeunload` the isolate takes no new request (the gateway starts another) and ends as
 * soon as it has no request in flight and no pending `waitUntil` promise ("drained"), or when a
 * limit or `graceMs` ends it first ("killed"). CPU time is counted from the moment the isolate
 * listens (Deno's own start-up is not the function's), sampled from `/proc` every `sampleMs`.
 *
 * It does not model: several isolates of one function serving requests side by side (a function
 * has one accepting isolate at a time here; retiring ones drain beside it), the per-request CPU
 * accounting of the platform (CPU here is the isolate's whole process), the 2 s request CPU budget
 * as such, cold-start caching, the gateway's JWT check, the log drain (an isolate's output is kept
 * here, line by line with its time, for the tests to count), or anything about the network.
 *
 * @module
 */

/** An isolate's limits. */
export interface IsolateLimits {
  /** Wall-clock life; killed when it has passed. */
  readonly wallClockMs: number;
  /** How long before the wall-clock limit `beforeunload` (`WallClockTime`) is dispatched. */
  readonly unloadNoticeMs: number;
  /** CPU time after which `beforeunload` (`CPUTime`) is dispatched. */
  readonly cpuSoftMs: number;
  /** CPU time after which the isolate is killed. */
  readonly cpuHardMs: number;
  /** Resident memory (MB) above which `beforeunload` (`Memory`) is dispatched. */
  readonly memoryMb: number;
  /** Time from a `Memory` or `EarlyDrop` unload to the kill, if the isolate has not drained. */
  readonly graceMs: number;
}

/** The platform's figures (paid plan wall clock); tests compress them. */
export const PLATFORM_LIMITS: IsolateLimits = {
  wallClockMs: 400_000,
  unloadNoticeMs: 2_000,
  cpuSoftMs: 2_000,
  cpuHardMs: 4_000,
  memoryMb: 256,
  graceMs: 2_000,
};

/** One function the supervisor serves. */
export interface EdgeFunctionSpec {
  /** Its name (the URL path segment). */
  readonly name: string;
  /** Its entry module (path). */
  readonly entry: string;
  /** The `deno.json` it runs with. */
  readonly config: string;
  /** Its secrets (environment variables). */
  readonly env: Readonly<Record<string, string>>;
}

/** Why an isolate ended. Clean ends: `drained`, `exited`. */
export type EndCause =
  | "drained"
  | "exited"
  | "wall clock"
  | "cpu hard"
  | "memory"
  | "grace"
  | "sigkill"
  | "supervisor stopped";

/** One line an isolate wrote. */
export interface IsolateLine {
  /** When it was read (ms since the epoch). */
  readonly at: number;
  /** The line. */
  readonly text: string;
}

/** What happened to one isolate. */
export interface IsolateRecord {
  /** Its id (also its `SB_EXECUTION_ID`, so its worker id). */
  readonly id: string;
  /** The function. */
  readonly fn: string;
  /** Its limits. */
  readonly limits: IsolateLimits;
  /** When it was spawned. */
  readonly spawnedAt: number;
  /** When it listened. */
  listeningAt?: number;
  /** When `beforeunload` was dispatched, and why. */
  unload?: { readonly reason: string; readonly at: number };
  /** When and how it ended. */
  end?: { readonly at: number; readonly cause: EndCause; readonly code: number | null };
  /** Its output, both streams, line by line. */
  readonly lines: IsolateLine[];
  /** CPU ms since it listened, and resident MB, as last sampled. */
  cpuMs: number;
  rssMb: number;
}

/** Options of {@link EdgeSupervisor}. */
export interface SupervisorOptions {
  /** The functions served. */
  readonly functions: readonly EdgeFunctionSpec[];
  /** Default limits. */
  readonly limits?: Partial<IsolateLimits>;
  /** Limits of one isolate (the `n`th of its function, from 0), over the defaults. */
  readonly limitsFor?: (fn: string, n: number) => Partial<IsolateLimits>;
  /** Sampling period of CPU, memory and the clock; default 50 ms. */
  readonly sampleMs?: number;
  /** Called when an isolate is spawned, unloaded or ended. */
  readonly onEvent?: (record: IsolateRecord, event: "spawn" | "unload" | "end") => void;
}

interface Live {
  readonly record: IsolateRecord;
  readonly process: Deno.ChildProcess;
  readonly listening: Promise<number>;
  resolveListening(port: number): void;
  conn?: Deno.UnixConn;
  port?: number;
  pending: number;
  requests: number;
  served: number;
  cpuBaseMs?: number;
  ended: Promise<void>;
}

const PRELOAD = new URL("./isolate_preload.ts", import.meta.url).pathname;
const TICKS_PER_SECOND = 100;

/**
 * The runtime stand-in: see the module documentation.
 *
 * @example
 * ```ts
 * const supervisor = new EdgeSupervisor({ functions: [spec], limits: { wallClockMs: 5_000 } });
 * await supervisor.start();
 * await fetch(`${supervisor.url}/functions/v1/${spec.name}`, { method: "POST" });
 * await supervisor.stop();
 * ```
 */
export class EdgeSupervisor {
  readonly #options: SupervisorOptions;
  readonly #limits: IsolateLimits;
  readonly #live = new Map<string, Live>();
  readonly #spawned = new Map<string, number>();
  /** Every isolate started, in order. */
  readonly isolates: IsolateRecord[] = [];
  #server?: Deno.HttpServer;
  #control?: Deno.Listener;
  #dir?: string;
  #timer?: ReturnType<typeof setInterval>;
  #port = 0;
  #stopped = false;

  constructor(options: SupervisorOptions) {
    this.#options = options;
    this.#limits = { ...PLATFORM_LIMITS, ...options.limits };
  }

  /** The gateway's base URL (the project URL the keep-alive pings). */
  get url(): string {
    return `http://127.0.0.1:${this.#port}`;
  }

  /** Starts the gateway and the control socket. */
  async start(): Promise<void> {
    this.#dir = await Deno.makeTempDir({ prefix: "edge_standin_" });
    this.#control = Deno.listen({ transport: "unix", path: `${this.#dir}/control.sock` });
    this.#acceptControl(this.#control);
    const listening = Promise.withResolvers<number>();
    this.#server = Deno.serve({
      hostname: "127.0.0.1",
      port: 0,
      onListen: ({ port }) => listening.resolve(port),
    }, (request) => this.#route(request));
    this.#port = await listening.promise;
    this.#timer = setInterval(() => this.#sample(), this.#options.sampleMs ?? 50);
  }

  /** The isolate that takes requests for `fn` now, if one runs. */
  current(fn: string): IsolateRecord | undefined {
    const live = this.#accepting(fn);
    return live?.record;
  }

  /** Kills an isolate at once, without `beforeunload` (as `kill -9` on its process). */
  kill(id: string): void {
    const live = this.#live.get(id);
    if (live !== undefined) this.#end(live, "sigkill");
  }

  /** Dispatches `beforeunload` with `reason` in an isolate (as a limit would). */
  unload(id: string, reason: string): void {
    const live = this.#live.get(id);
    if (live !== undefined) this.#unload(live, reason);
  }

  /** Kills every isolate and closes the gateway. */
  async stop(): Promise<void> {
    this.#stopped = true;
    clearInterval(this.#timer);
    for (const live of this.#live.values()) this.#end(live, "supervisor stopped");
    await Promise.all([...this.#live.values()].map((l) => l.ended));
    await this.#server?.shutdown();
    this.#control?.close();
    if (this.#dir !== undefined) await Deno.remove(this.#dir, { recursive: true }).catch(() => {});
  }

  #accepting(fn: string): Live | undefined {
    for (const live of this.#live.values()) {
      if (live.record.fn === fn && live.record.unload === undefined && !live.record.end) {
        return live;
      }
    }
    return undefined;
  }

  async #route(request: Request): Promise<Response> {
    const url = new URL(request.url);
    const match = /^\/functions\/v1\/([A-Za-z0-9_-]+)(\/.*)?$/.exec(url.pathname);
    const spec = this.#options.functions.find((f) => f.name === match?.[1]);
    if (match === null || spec === undefined) {
      return new Response(JSON.stringify({ error: "function not found" }), { status: 404 });
    }
    if (this.#stopped) return new Response("stopping", { status: 503 });
    const live = this.#accepting(spec.name) ?? this.#spawn(spec);
    let port: number;
    try {
      port = await deadline(live.listening, 60_000, `isolate ${live.record.id} to listen`);
    } catch (error) {
      return new Response(JSON.stringify({ error: (error as Error).message }), { status: 502 });
    }
    live.served++;
    try {
      const response = await fetch(
        `http://127.0.0.1:${port}/${spec.name}${match[2] ?? ""}${url.search}`,
        {
          method: request.method,
          headers: request.headers,
          body: request.method === "GET" || request.method === "HEAD"
            ? undefined
            : await request.arrayBuffer(),
        },
      );
      const body = await response.arrayBuffer();
      return new Response(body, { status: response.status, headers: response.headers });
    } catch (error) {
      // The isolate ended while the request was in flight, as on the platform.
      return new Response(JSON.stringify({ error: (error as Error).message }), { status: 502 });
    }
  }

  #spawn(spec: EdgeFunctionSpec): Live {
    const n = this.#spawned.get(spec.name) ?? 0;
    this.#spawned.set(spec.name, n + 1);
    const limits = { ...this.#limits, ...this.#options.limitsFor?.(spec.name, n) };
    const id = crypto.randomUUID();
    const process = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--no-lock", "--config", spec.config, "--preload", PRELOAD, spec.entry],
      cwd: this.#dir,
      env: {
        ...spec.env,
        NO_COLOR: "1",
        SB_EXECUTION_ID: id,
        EDGE_STANDIN_CONTROL: `${this.#dir}/control.sock`,
      },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const record: IsolateRecord = {
      id,
      fn: spec.name,
      limits,
      spawnedAt: Date.now(),
      lines: [],
      cpuMs: 0,
      rssMb: 0,
    };
    const listening = Promise.withResolvers<number>();
    listening.promise.catch(() => {});
    const live: Live = {
      record,
      process,
      listening: listening.promise,
      resolveListening: listening.resolve,
      pending: 0,
      requests: 0,
      served: 0,
      ended: Promise.resolve(),
    };
    const streams = [collect(process.stdout, record), collect(process.stderr, record)];
    live.ended = Promise.all([process.status, ...streams]).then(([status]) => {
      listening.reject(new Error(`isolate ${id} ended before it listened`));
      if (record.end === undefined) {
        record.end = { at: Date.now(), cause: "exited", code: status.code };
        this.#options.onEvent?.(record, "end");
      }
      this.#live.delete(id);
    });
    this.#live.set(id, live);
    this.isolates.push(record);
    this.#options.onEvent?.(record, "spawn");
    return live;
  }

  async #acceptControl(listener: Deno.Listener): Promise<void> {
    for await (const conn of listener) this.#readControl(conn as Deno.UnixConn);
  }

  async #readControl(conn: Deno.UnixConn): Promise<void> {
    let live: Live | undefined;
    const decoder = new TextDecoder();
    let buffer = "";
    const chunk = new Uint8Array(4096);
    while (true) {
      const n = await conn.read(chunk).catch(() => null);
      if (n === null) return;
      buffer += decoder.decode(chunk.subarray(0, n), { stream: true });
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const message = JSON.parse(buffer.slice(0, newline)) as Record<string, unknown>;
        buffer = buffer.slice(newline + 1);
        if (message.type === "hello") {
          live = this.#live.get(message.id as string);
          if (live !== undefined) live.conn = conn;
          continue;
        }
        if (live === undefined) continue;
        if (message.type === "listening") {
          live.port = message.port as number;
          live.record.listeningAt = message.at as number;
          live.cpuBaseMs = cpuMs(live.process.pid);
          live.resolveListening(live.port);
        } else if (message.type === "state") {
          live.pending = message.pending as number;
          live.requests = message.requests as number;
          this.#checkIdle(live);
        }
      }
    }
  }

  #checkIdle(live: Live): void {
    if (live.record.end !== undefined || live.served === 0) return;
    if (live.pending > 0 || live.requests > 0) return;
    if (live.record.unload === undefined) this.#unload(live, "EarlyDrop");
    else this.#end(live, "drained");
  }

  #unload(live: Live, reason: string): void {
    if (live.record.unload !== undefined || live.record.end !== undefined) return;
    live.record.unload = { reason, at: Date.now() };
    this.#options.onEvent?.(live.record, "unload");
    // A hard CPU limit just above the soft one stands for code that keeps burning CPU after the
    // notice: the isolate is told to spin, so the hard limit ends it (CPU is sampled in clock ticks
    // of 10 ms, and a quick drain would otherwise often exit first).
    const limits = live.record.limits;
    const spin = reason === "CPUTime" && limits.cpuHardMs - limits.cpuSoftMs <= 50;
    const command = new TextEncoder().encode(
      JSON.stringify({ type: "unload", reason, spin }) + "\n",
    );
    live.conn?.write(command).catch(() => {});
    if (live.conn === undefined) this.#end(live, "grace");
  }

  #end(live: Live, cause: EndCause): void {
    if (live.record.end !== undefined) return;
    live.record.end = { at: Date.now(), cause, code: null };
    this.#options.onEvent?.(live.record, "end");
    try {
      live.process.kill("SIGKILL");
    } catch {
      // Already gone.
    }
    try {
      live.conn?.close();
    } catch {
      // Already closed.
    }
  }

  #sample(): void {
    const now = Date.now();
    for (const live of this.#live.values()) {
      const { record } = live;
      if (record.end !== undefined) continue;
      const limits = record.limits;
      const age = now - record.spawnedAt;
      if (age >= limits.wallClockMs) {
        this.#end(live, "wall clock");
        continue;
      }
      if (live.cpuBaseMs !== undefined) {
        record.cpuMs = cpuMs(live.process.pid) - live.cpuBaseMs;
        if (record.cpuMs >= limits.cpuHardMs) {
          this.#end(live, "cpu hard");
          continue;
        }
      }
      record.rssMb = rssMb(live.process.pid);
      const unload = record.unload;
      if (unload !== undefined) {
        if (
          (unload.reason === "Memory" || unload.reason === "EarlyDrop") &&
          now - unload.at >= limits.graceMs
        ) {
          this.#end(live, unload.reason === "Memory" ? "memory" : "grace");
        }
        continue;
      }
      if (age >= limits.wallClockMs - limits.unloadNoticeMs) this.#unload(live, "WallClockTime");
      else if (live.cpuBaseMs !== undefined && record.cpuMs >= limits.cpuSoftMs) {
        this.#unload(live, "CPUTime");
      } else if (record.rssMb >= limits.memoryMb) this.#unload(live, "Memory");
    }
  }
}

async function collect(stream: ReadableStream<Uint8Array>, record: IsolateRecord): Promise<void> {
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of stream) {
    buffer += decoder.decode(chunk, { stream: true });
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      record.lines.push({ at: Date.now(), text: buffer.slice(0, newline) });
      buffer = buffer.slice(newline + 1);
    }
  }
  if (buffer !== "") record.lines.push({ at: Date.now(), text: buffer });
}

/** User + system CPU time of a process, in ms (`/proc/<pid>/stat`). */
function cpuMs(pid: number): number {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // Fields after the command name (which may hold spaces) start at its closing parenthesis.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 1000 / TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** Resident memory of a process, in MB (`/proc/<pid>/status`). */
function rssMb(pid: number): number {
  try {
    const status = Deno.readTextFileSync(`/proc/${pid}/status`);
    const kb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? 0);
    return kb / 1024;
  } catch {
    return 0;
  }
}

function deadline<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
