/**
 * Child process of the memory benchmark: one worker alone in its own process, so its resident
 * set is not mixed with the benchmark's. Prints one JSON line when polling and one after it has
 * run the given number of tasks.
 *
 * usage: deno run -A bench/memory_worker.ts URL TASKS POLL_INTERVAL_MS [SAMPLE_SECONDS]
 *
 * With SAMPLE_SECONDS (and TASKS 0), the worker reads with a visibility timeout of 1 s and the
 * second line, printed after SAMPLE_SECONDS, carries the highest resident set and heap seen
 * meanwhile (sampled every 20 ms): for a message another sender puts on the queue, which every
 * read sees again.
 *
 * @module
 */
import { createLogger, createWorker, Flow } from "../mod.ts";
import { sleep } from "./clock.ts";

const [url, tasksArg, pollArg, sampleArg] = Deno.args;
const tasks = Number(tasksArg);
const sampleSeconds = sampleArg === undefined ? 0 : Number(sampleArg);
let handled = 0;
// A counter only: a handler that kept anything would measure itself, not the worker.
const flow = new Flow<unknown>({ slug: "bench_memory" }).step({ slug: "work" }, () => {
  handled++;
  return null;
});
const worker = createWorker(flow, {
  connectionString: url,
  maxConcurrent: 10,
  batchSize: 10,
  pollIntervalMs: Number(pollArg),
  functionName: "bench",
  ...(sampleSeconds > 0 ? { visibilityTimeout: 1 } : {}),
  logger: createLogger({ level: "warn" }),
});
let peak = { rss: 0, heapUsed: 0 };
const report = (event: string) => {
  const m = Deno.memoryUsage();
  const rss = Math.max(m.rss, peak.rss);
  console.log(
    JSON.stringify({ event, handled, rss, heapUsed: Math.max(m.heapUsed, peak.heapUsed) }),
  );
};
await worker.start();
report("ready");
if (sampleSeconds > 0) {
  const until = performance.now() + sampleSeconds * 1000;
  while (performance.now() < until) {
    const m = Deno.memoryUsage();
    peak = { rss: Math.max(peak.rss, m.rss), heapUsed: Math.max(peak.heapUsed, m.heapUsed) };
    await sleep(20);
  }
}
while (handled < tasks || worker.inFlight > 0) await sleep(20);
// Let the last completions return their connections before reading the figure.
await sleep(300);
report("done");
await worker.stop();
