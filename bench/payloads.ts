/**
 * Memory of one worker per MB of payload: a worker process with an Edge isolate's heap (256 MB,
 * `--max-old-space-size`) runs large outputs, large run inputs and large maps, and the peak
 * resident set (the kernel's high-water mark, `VmHWM`) and heap of each are printed beside the
 * idle worker's; then, in a process of its own, where the copies of one payload are on its way
 * through the worker (text from postgres.js, the parsed value, the output's text, the parameter
 * postgres.js sends). Figures are in `docs/reliability.md` (Large payloads). Nothing is asserted.
 *
 * `deno run -A bench/payloads.ts [--heap-mb N]`
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { makePayload, type OutputSpec } from "./payloads_worker.ts";
import { parseJsonb } from "../src/util/json_parse.ts";
import { jsonText } from "../src/util/json_write.ts";

const MiB = 2 ** 20;

/** A worker process limited like an Edge isolate (see `payloads_worker.ts`). */
export interface IsolateWorker {
  readonly pid: number;
  /** The process's highest resident set since it started or since {@link resetPeak}, in bytes. */
  peakRss(): number;
  /** Starts a new high-water mark of the resident set (`/proc/<pid>/clear_refs`). */
  resetPeak(): void;
  /** The highest heap used since the last call, in bytes (the worker samples it). */
  heapPeak(): Promise<number>;
  /** Resolves with the exit code once the process has ended. */
  readonly exited: Promise<number>;
  /** What the process wrote to stderr so far (an out-of-memory end says so there). */
  stderr(): string;
  /** How many log lines (warnings and errors) the worker has written. */
  logLines(): number;
  /** Ends the process (SIGTERM, then SIGKILL after 10 s) and waits for it. */
  stop(): Promise<void>;
}

/**
 * Starts `payloads_worker.ts` with a V8 heap of `heapMb` and, when given, `maxPayloadBytes`;
 * resolves once it polls.
 */
export async function startIsolateWorker(
  url: string,
  options: { heapMb?: number; maxPayloadBytes?: number } = {},
): Promise<IsolateWorker> {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      `--v8-flags=--max-old-space-size=${options.heapMb ?? 256}`,
      new URL("./payloads_worker.ts", import.meta.url).pathname,
      url,
      ...(options.maxPayloadBytes === undefined ? [] : [String(options.maxPayloadBytes)]),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  let errors = "";
  const errorsDone = child.stderr.pipeThrough(new TextDecoderStream()).pipeTo(
    new WritableStream({ write: (chunk) => void (errors += chunk) }),
  ).catch(() => {});
  const lines = child.stdout.pipeThrough(new TextDecoderStream())[Symbol.asyncIterator]();
  let buffer = "";
  let logLines = 0;
  const next = async (): Promise<{ event: string; heapUsed?: number }> => {
    while (!buffer.includes("\n")) {
      const { value, done } = await lines.next();
      if (done) throw new Error(`the payload worker exited: ${errors.slice(-2000)}`);
      buffer += value;
    }
    const line = buffer.slice(0, buffer.indexOf("\n"));
    buffer = buffer.slice(buffer.indexOf("\n") + 1);
    const parsed = JSON.parse(line);
    // The worker's own log lines (warnings) go to stdout too: only the child's events answer.
    if (parsed.event === "ready" || parsed.event === "peak") return parsed;
    logLines++;
    return await next();
  };
  const writer = child.stdin.getWriter();
  const exited = child.status.then(async (s) => {
    await errorsDone;
    return s.code;
  });
  await next();
  const pid = child.pid;
  return {
    pid,
    peakRss: () => {
      const status = Deno.readTextFileSync(`/proc/${pid}/status`);
      return Number(/VmHWM:\s+(\d+)/.exec(status)?.[1] ?? 0) * 1024;
    },
    resetPeak: () => Deno.writeTextFileSync(`/proc/${pid}/clear_refs`, "5"),
    heapPeak: async () => {
      await writer.write(new TextEncoder().encode("peak\n"));
      return (await next()).heapUsed ?? 0;
    },
    exited,
    stderr: () => errors,
    logLines: () => logLines,
    stop: async () => {
      try {
        child.kill("SIGTERM");
      } catch {
        // Already ended.
      }
      const timer = setTimeout(() => {
        try {
          child.kill("SIGKILL");
        } catch {
          // Already ended.
        }
      }, 10_000);
      await exited;
      clearTimeout(timer);
      await writer.close().catch(() => {});
    },
  };
}

/** Waits until the run is no longer `started` (at most `ms`); returns its status. */
export async function settled(sql: postgres.Sql, runId: string, ms = 120_000): Promise<string> {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    const [row] = await sql<{ status: string }[]>`
      select status from pgflow.runs where run_id = ${runId}::uuid`;
    if (row.status !== "started") return row.status;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`run ${runId} still started after ${ms} ms`);
}

/** Starts `payload_output` making `spec`. */
export async function startOutputRun(sql: postgres.Sql, spec: OutputSpec): Promise<string> {
  const [row] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow('payload_output', ${JSON.stringify(spec)}::text::jsonb)`;
  return row.run_id;
}

/**
 * Starts `payload_input` with an object of about `mb` MB built in SQL (string values, or arrays
 * of small records when `records`), never held by this process.
 */
export async function startInputRun(
  sql: postgres.Sql,
  mb: number,
  records = false,
): Promise<string> {
  const keys = Math.max(1, Math.round(mb * MiB / 1024));
  const [row] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow('payload_input', (
      select jsonb_object_agg('k' || i, case when ${records} then (
               select jsonb_agg(jsonb_build_object('id', j, 'name', 'record ' || j, 'ok', true))
               from generate_series(1, 25) j)
             else to_jsonb(repeat('v', 1010)) end)
      from generate_series(1, ${keys}::integer) i))`;
  return row.run_id;
}

/** Starts `payload_map` over the numbers 1 to `n`. */
export async function startMapRun(sql: postgres.Sql, n: number): Promise<string> {
  const [row] = await sql<{ run_id: string }[]>`
    select run_id from pgflow.start_flow('payload_map',
      (select jsonb_agg(i) from generate_series(1, ${n}::integer) i))`;
  return row.run_id;
}

interface Figure {
  readonly what: string;
  readonly mb: number;
  readonly seconds: number;
  readonly status: string;
  readonly rss: number;
  readonly heap: number;
}

async function measure(
  sql: postgres.Sql,
  worker: IsolateWorker,
  what: string,
  mb: number,
  start: () => Promise<string>,
): Promise<Figure> {
  await worker.heapPeak();
  worker.resetPeak();
  const t0 = performance.now();
  const status = await settled(sql, await start(), 600_000);
  const seconds = (performance.now() - t0) / 1000;
  return { what, mb, seconds, status, rss: worker.peakRss(), heap: await worker.heapPeak() };
}

/** The size of each copy of one payload on its way through a worker, in this process. */
function copies(spec: OutputSpec): Record<string, number> {
  const gc = (globalThis as { gc?: () => void }).gc!;
  const heap = () => {
    gc();
    return Deno.memoryUsage().heapUsed;
  };
  const base = heap();
  const value = makePayload(spec);
  const parsedBytes = heap() - base;
  const text = jsonText(value, "output")!;
  const textBytes = heap() - base - parsedBytes;
  // postgres.js writes a text[] parameter as an array literal, escaping every quote and backslash.
  const literal = '{"' + text.replace(/[\\"]/g, "\\$&") + '"}';
  const wire = new TextEncoder().encode(literal);
  const reparsed = parseJsonb(text);
  return {
    textMb: text.length / MiB,
    parsedHeapPerTextMb: parsedBytes / text.length,
    textHeapPerTextMb: textBytes / text.length,
    parameterLiteralPerTextMb: literal.length / text.length,
    wireBytesPerTextMb: wire.length / text.length,
    reparsedSame: Number(JSON.stringify(reparsed) === text),
  };
}

if (import.meta.main && Deno.args[0] === "copies") {
  for (const shape of ["records", "string"] as const) {
    console.log(JSON.stringify({ shape, ...copies({ mb: 10, shape }) }));
  }
} else if (import.meta.main) {
  const heapMb = Number(Deno.args[Deno.args.indexOf("--heap-mb") + 1] || 256);
  const db = await openPgflowDatabase();
  const sql = postgres(db.url, { max: 2, onnotice: () => {} });
  // Unbounded for the figures: the bound is what they decide.
  const worker = await startIsolateWorker(db.url, { heapMb, maxPayloadBytes: 268_435_455 });
  const mib = (b: number) => (b / MiB).toFixed(0);
  try {
    await new Promise((r) => setTimeout(r, 1000));
    const idle = { rss: worker.peakRss(), heap: await worker.heapPeak() };
    console.log(
      `worker with --max-old-space-size=${heapMb}: idle RSS ${mib(idle.rss)} MiB, ` +
        `heap ${mib(idle.heap)} MiB`,
    );
    const figures: Figure[] = [];
    const runs: [string, number, () => Promise<string>][] = [];
    for (const mb of [1, 5, 10]) {
      runs.push([`output, records`, mb, () => startOutputRun(sql, { mb, shape: "records" })]);
    }
    for (const mb of [10, 40]) {
      runs.push([`output, one string`, mb, () => startOutputRun(sql, { mb, shape: "string" })]);
    }
    for (const mb of [5]) {
      runs.push([`run input, strings`, mb, () => startInputRun(sql, mb)]);
      runs.push([`run input, records`, mb, () => startInputRun(sql, mb, true)]);
    }
    for (const n of [10_000, 100_000]) {
      runs.push([`map of ${n} numbers`, n, () => startMapRun(sql, n)]);
    }
    for (const [what, mb, start] of runs) {
      const f = await measure(sql, worker, what, mb, start);
      figures.push(f);
      const perMb = what.startsWith("map")
        ? ""
        : `; per MB: RSS +${((f.rss - idle.rss) / MiB / mb).toFixed(1)} MiB, heap +${
          ((f.heap - idle.heap) / MiB / mb).toFixed(1)
        } MiB`;
      console.log(
        `${what} ${what.startsWith("map") ? "" : `${mb} MB `}: ${f.status} in ${
          f.seconds.toFixed(1)
        } s, peak RSS ${mib(f.rss)} MiB, heap ${mib(f.heap)} MiB${perMb}`,
      );
    }
  } finally {
    await worker.stop();
    if (worker.stderr().trim() !== "") {
      console.log(`worker stderr: ${worker.stderr().slice(-2000)}`);
    }
    await sql.end();
    await db.close();
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "--v8-flags=--expose-gc", new URL(import.meta.url).pathname, "copies"],
  }).output();
  console.log(new TextDecoder().decode(out.stdout).trim());
}
