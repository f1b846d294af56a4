/**
 * Child process of the payload benchmark and of `tests/reliability/large_payloads_test.ts`: one
 * worker alone in its process (start it with `--v8-flags=--max-old-space-size=N` to give it an
 * Edge isolate's heap), serving the flows below on the queue `payloads`. Prints one JSON line
 * `{"event":"ready"}` once polling; then, for each line `peak` on its stdin, one line with the
 * highest heap used since the previous one (sampled every 5 ms, and after every task).
 *
 * usage: deno run -A [--v8-flags=...] bench/payloads_worker.ts URL [MAX_PAYLOAD_BYTES]
 *
 * Flows (every handler keeps nothing once it has returned):
 * - `payload_output`: `make` returns about `mb` MB (`shape` `string`: one string; `records`: an
 *   array of small objects), `measure` receives it and returns its length;
 * - `payload_input`: `first` receives the run input and returns its length, `again` reads it
 *   through `ctx.flowInput` and does the same;
 * - `payload_map`: `double` maps over the run input (an array of numbers), `sum` adds the aggregate.
 *
 * @module
 */
import { createLogger, createWorker, Flow, routeFlow } from "../mod.ts";

/** The queue every payload flow is routed to. */
export const PAYLOAD_QUEUE = "payloads";

/** The input of `payload_output`. */
export interface OutputSpec {
  readonly mb: number;
  readonly shape: "string" | "records";
}

/**
 * About `mb` MB of JSON: one string, or records of about 100 bytes each (the shape real outputs
 * have, which costs a parser far more per byte than one string does).
 */
export function makePayload(spec: OutputSpec): unknown {
  const bytes = Math.round(spec.mb * 2 ** 20);
  if (spec.shape === "string") return { blob: "x".repeat(bytes) };
  return Array.from({ length: Math.round(bytes / 100) }, (_, i) => ({
    id: i,
    name: `record ${i}`,
    tags: ["alpha", "beta"],
    score: i * 0.5,
    ok: i % 2 === 0,
  }));
}

function lengthOf(value: unknown): number {
  if (Array.isArray(value)) return value.length;
  if (value !== null && typeof value === "object") return Object.keys(value).length;
  return 0;
}

const output = new Flow<OutputSpec>({ slug: "payload_output", maxAttempts: 1 })
  .step({ slug: "make" }, (input) => makePayload(input) as never)
  .step({ slug: "measure", dependsOn: ["make"] }, (deps) => lengthOf(deps.make));

const input = new Flow<{ [key: string]: unknown }>({ slug: "payload_input", maxAttempts: 1 })
  .step({ slug: "first" }, (run) => lengthOf(run))
  .step(
    { slug: "again", dependsOn: ["first"] },
    async (_deps, ctx) => lengthOf(await ctx.flowInput),
  );

const map = new Flow<number[]>({ slug: "payload_map", maxAttempts: 1 })
  .map({ slug: "double" }, (n) => n * 2)
  .step({ slug: "sum", dependsOn: ["double"] }, (deps) => deps.double.reduce((a, b) => a + b, 0));

/** The flows this worker serves, each routed to {@link PAYLOAD_QUEUE}. */
export const PAYLOAD_FLOWS = [
  routeFlow(output, { queues: { make: PAYLOAD_QUEUE, measure: PAYLOAD_QUEUE } }),
  routeFlow(input, { queues: { first: PAYLOAD_QUEUE, again: PAYLOAD_QUEUE } }),
  routeFlow(map, { queues: { double: PAYLOAD_QUEUE, sum: PAYLOAD_QUEUE } }),
] as const;

if (import.meta.main) {
  const [url, limit] = Deno.args;
  let peakHeap = 0;
  const sample = () => {
    peakHeap = Math.max(peakHeap, Deno.memoryUsage().heapUsed);
  };
  const timer = setInterval(sample, 5);
  const worker = createWorker(PAYLOAD_FLOWS, {
    connectionString: url,
    queueName: PAYLOAD_QUEUE,
    maxConcurrent: 100,
    batchSize: 100,
    maxPollSeconds: 1,
    pollIntervalMs: 20,
    heartbeatIntervalMs: 500,
    stalledRecoveryIntervalMs: 0,
    functionName: "payloads",
    ...(limit === undefined ? {} : { maxPayloadBytes: Number(limit) }),
    logger: createLogger({ level: "warn" }),
  });
  await worker.start();
  console.log(JSON.stringify({ event: "ready" }));
  const lines = Deno.stdin.readable.pipeThrough(new TextDecoderStream());
  let buffer = "";
  for await (const chunk of lines) {
    buffer += chunk;
    while (buffer.includes("\n")) {
      const line = buffer.slice(0, buffer.indexOf("\n"));
      buffer = buffer.slice(buffer.indexOf("\n") + 1);
      if (line !== "peak") continue;
      sample();
      console.log(JSON.stringify({ event: "peak", heapUsed: peakHeap }));
      peakHeap = 0;
    }
  }
  clearInterval(timer);
  await worker.stop();
}
