/**
 * Child process of the cold-start benchmark: a new worker process, timed from its first line to
 * its first handler call. Loads the engine's module (this tree's `mod.ts`, or the one given, to
 * compare trees with the same child), starts a worker at its defaults (the flow compiled already,
 * so the compile is a check; the logger's sink only marks) and prints one JSON line when the
 * first task runs, with the epoch milliseconds of each mark: the script's first line, the module
 * loaded, then each startup log event (connection, engine schema, flow compiled, worker
 * registered where the tree logs it, worker started), and the first handler call. Then it waits
 * for `stop` on stdin and stops.
 *
 * usage: deno run -A bench/cold_start_worker.ts URL FLOW_SLUG [MOD_URL]
 *
 * @module
 */
const marks: [string, number][] = [["script", performance.timeOrigin + performance.now()]];
const mark = (name: string) => marks.push([name, performance.timeOrigin + performance.now()]);
const [url, slug, modUrl] = Deno.args;
// A dynamic import, so that loading the module is measured apart from the process's boot.
const engine: typeof import("../mod.ts") = await import(modUrl ?? "../mod.ts");
mark("module");
let first: (() => void) | undefined;
const claimed = new Promise<void>((resolve) => first = resolve);
const flow = new engine.Flow<unknown>({ slug }).step({ slug: "work" }, () => {
  first?.();
  return null;
});
const worker = engine.createWorker(flow, {
  connectionString: url,
  functionName: "bench_cold",
  // Debug, for the startup's debug events; the sink only marks (each event's first time counts).
  logger: engine.createLogger({ level: "debug", sink: (r) => mark(r.event) }),
});
await worker.start();
await claimed;
mark("first task");
console.log(JSON.stringify({ marks }));
for await (const _ of Deno.stdin.readable) break;
await worker.stop();
