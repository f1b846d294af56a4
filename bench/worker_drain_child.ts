/**
 * Child process of `bench/worker_drain.ts`: one worker, alone in its own process, from the tree
 * whose `mod.ts` is given (so two versions of the worker run against the same database,
 * interleaved). It prints `{"event":"ready"}` once polling, then, after handling TASKS tasks and
 * seeing their reports land, one line with its own CPU time (user + system, from /proc) and the
 * wall time from its first handler call to its last report; it stops once its stdin has a line
 * or ends.
 *
 * usage: deno run -A bench/worker_drain_child.ts MOD_TS URL TASKS [single|chain] [bench|defaults]
 *
 * `chain` runs the 3-step chain `bench_drain_chain` (a → b → c, one queue) instead of the
 * single-step `bench_drain`; TASKS counts tasks either way. `defaults` starts the worker as
 * bench/cells.ts's public-defaults cell does: nothing but the connection and a logger at its
 * default level (info) writing to an in-process sink; `bench` (the default) sets concurrency 10,
 * batch 10 and a logger at `warn`.
 *
 * @module
 */
const [modPath, url, tasksArg, shape = "single", settings = "bench"] = Deno.args;
const tasks = Number(tasksArg);
const mod = await import(modPath);

/** User and system CPU milliseconds of this process (Linux: /proc/self/stat, 1/100 s ticks). */
function ownCpuMs(): { user: number; system: number } {
  const stat = Deno.readTextFileSync("/proc/self/stat");
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
  return { user: f[11] * 10, system: f[12] * 10 };
}

let handled = 0;
let cpu0 = { user: 0, system: 0 };
let t0 = 0;
// A counter only: the handler does nothing else, so the figures are the worker's own.
const handler = () => {
  if (handled++ === 0) {
    cpu0 = ownCpuMs();
    t0 = performance.now();
  }
  return null;
};
const flow = shape === "chain"
  ? new mod.Flow({ slug: "bench_drain_chain" }).step({ slug: "a" }, handler)
    .step({ slug: "b", dependsOn: ["a"] }, handler).step({ slug: "c", dependsOn: ["b"] }, handler)
  : new mod.Flow({ slug: "bench_drain" }).step({ slug: "work" }, handler);
let logged = 0;
const worker = mod.createWorker(
  flow,
  settings === "defaults"
    ? { connectionString: url, logger: mod.createLogger({ sink: () => logged++ }) }
    : {
      connectionString: url,
      maxConcurrent: 10,
      batchSize: 10,
      functionName: "bench",
      logger: mod.createLogger({ level: "warn" }),
    },
);
await worker.start();
console.log(JSON.stringify({ event: "ready" }));
while (handled < tasks || worker.inFlight > 0) {
  await new Promise((resolve) => setTimeout(resolve, handled < tasks ? 20 : 1));
}
const seconds = (performance.now() - t0) / 1000;
const cpu = ownCpuMs();
const userMs = cpu.user - cpu0.user;
const systemMs = cpu.system - cpu0.system;
console.log(
  JSON.stringify({ event: "done", handled, seconds, cpuMs: userMs + systemMs, systemMs }),
);
// Connections stay open until the parent has read the server's CPU: a backend ending meanwhile
// takes its time out of the live processes before the postmaster has reaped it.
for await (const _ of Deno.stdin.readable) break;
await worker.stop();
