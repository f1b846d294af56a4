/**
 * Child process of the memory benchmark: one worker alone in its own process, so its resident
 * set is not mixed with the benchmark's. Prints one JSON line when polling and one after it has
 * run the given number of tasks.
 *
 * usage: deno run -A bench/memory_worker.ts URL TASKS POLL_INTERVAL_MS
 *
 * @module
 */
import { Flow } from "../mod.ts";
import { createLogger } from "../src/platform/logger.ts";
import { instantiateWorker } from "../src/worker/worker.ts";
import { sleep } from "../src/worker/backoff.ts";

const [url, tasksArg, pollArg] = Deno.args;
const tasks = Number(tasksArg);
let handled = 0;
// A counter only: a handler that kept anything would measure itself, not the worker.
const flow = new Flow<unknown>({ slug: "bench_memory" }).step({ slug: "work" }, () => {
  handled++;
  return null;
});
const worker = instantiateWorker(flow, {
  connectionString: url,
  maxConcurrent: 10,
  batchSize: 10,
  pollIntervalMs: Number(pollArg),
  functionName: "bench",
  logger: createLogger({ level: "warn" }),
});
const report = (event: string) => {
  const m = Deno.memoryUsage();
  console.log(JSON.stringify({ event, handled, rss: m.rss, heapUsed: m.heapUsed }));
};
await worker.start();
report("ready");
while (handled < tasks || worker.inFlight > 0) await sleep(20);
// Let the last completions return their connections before reading the figure.
await sleep(300);
report("done");
await worker.stop();
