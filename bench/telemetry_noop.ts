/**
 * The task path's telemetry with no exporter, per attempt: `startAttempt(...)` and its `end(...)`
 * (the API's no-op span and counters) in this tree and, with `--before DIR`, in another that has
 * them (`main` unpacked with `git archive`), timed in turns so both see the same machine. Without
 * `--before` it times this tree alone: against a tree from before telemetry, which made no such
 * call, that time is the whole of what telemetry off adds per attempt. A whole task costs a worker
 * about 0.3 ms of CPU (`bench/telemetry_cost.ts`); this says how much of it telemetry off is.
 *
 *   deno run -A bench/telemetry_noop.ts [--before /tmp/pgflow-main] [--calls 200000] [--rounds 7]
 *
 * Run it without `OTEL_DENO`: it measures the no-op.
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    before: { type: "string" },
    calls: { type: "string", default: "200000" },
    rounds: { type: "string", default: "7" },
  },
});
/** The attempt's identity as `startAttempt` takes it (the bench reaches the module by import()). */
interface AttemptIdentity {
  queue: string;
  workerId: string;
  flowSlug: string;
  stepSlug: string;
  runId: string;
  taskIndex: number;
  attempt: number;
}
type Start = (task: AttemptIdentity) => { end(outcome: "completed", s: number): void };
const trees: [string, Start][] = [
  ...(args.before === undefined ? [] : [[
    "before",
    (await import(`${args.before}/src/telemetry/attempts.ts`)).startAttempt,
  ] as [string, Start]]),
  ["after", (await import("../src/telemetry/attempts.ts")).startAttempt],
];
const calls = Number(args.calls);
const task = {
  queue: "demo",
  workerId: crypto.randomUUID(),
  flowSlug: "demo",
  stepSlug: "a",
  runId: crypto.randomUUID(),
  taskIndex: 0,
  attempt: 2,
};
const ns = new Map<string, number[]>();
for (let round = 0; round < Number(args.rounds); round++) {
  for (const [name, start] of round % 2 ? [...trees].reverse() : trees) {
    const t0 = performance.now();
    for (let i = 0; i < calls; i++) start(task).end("completed", 0.001);
    ns.set(name, [...(ns.get(name) ?? []), (performance.now() - t0) * 1e6 / calls]);
  }
}
for (const [name, xs] of ns) {
  const s = [...xs].sort((a, b) => a - b);
  console.log(
    `${name}: ${s[(s.length - 1) >> 1].toFixed(0)} ns per attempt (median; ${s[0].toFixed(0)}–${
      s.at(-1)!.toFixed(0)
    })`,
  );
}
