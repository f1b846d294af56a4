/**
 * Child process of the cold-start benchmark: a new worker process, timed from its first line to
 * its first handler call. Loads the module, starts a worker at its defaults (info logger to an
 * in-process sink; the flow compiled already, so the compile is a check) and prints one JSON line
 * when the first task runs, with the epoch milliseconds of each mark: the script's first line,
 * the module loaded, then each startup log event (connection, engine schema, flow compiled,
 * worker started), and the first handler call. Then it waits for `stop` on stdin and stops.
 *
 * usage: deno run -A bench/cold_start_worker.ts URL FLOW_SLUG
 *
 * @module
 */
const marks: [string, number][] = [["script", performance.timeOrigin + performance.now()]];
const mark = (name: string) => marks.push([name, performance.timeOrigin + performance.now()]);
const [url, slug] = Deno.args;
// A dynamic import, so that loading the module is measured apart from the process's boot.
const { createLogger, createWorker, Flow } = await import("../mod.ts");
mark("module");
let first: (() => void) | undefined;
const claimed = new Promise<void>((resolve) => first = resolve);
const flow = new Flow<unknown>({ slug }).step({ slug: "work" }, () => {
  first?.();
  return null;
});
const worker = createWorker(flow, {
  connectionString: url,
  functionName: "bench_cold",
  logger: createLogger({ level: "info", sink: (r) => mark(r.event) }),
});
await worker.start();
await claimed;
mark("first task");
console.log(JSON.stringify({ marks }));
for await (const _ of Deno.stdin.readable) break;
await worker.stop();
