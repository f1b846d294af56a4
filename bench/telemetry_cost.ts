/**
 * What telemetry costs per task: `bench/profile.ts` (one durable server per run, the chain flow,
 * workers in its process) run as a child process in three variants, interleaved round by round and
 * rotated so no variant always goes first:
 *
 * - `before`: another tree (e.g. `main`, unpacked with `git archive`), `OTEL_DENO` unset;
 * - `off`: this tree, `OTEL_DENO` unset (the API's no-op);
 * - `on`: this tree, `OTEL_DENO=true` exporting (http/protobuf, Deno's default) to a receiver in
 *   this process that answers 200 and counts the bytes it is sent.
 *
 *   deno run -A bench/telemetry_cost.ts --before /tmp/pgflow-main [--rounds 3] [--tasks 1500]
 *                                       [--variants before,off,on]
 *
 * Prints each run's tasks/s, server CPU ms/task and worker-process CPU ms/task, then per variant
 * the median and range; CPU time per task, unlike a rate, does not grow when other programs keep
 * the cores busy. The `before` tree must hold this tree's bench/profile.ts (copy it there).
 *
 * @module
 */
import { parseArgs } from "node:util";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    before: { type: "string" },
    rounds: { type: "string", default: "3" },
    tasks: { type: "string", default: "1500" },
    variants: { type: "string", default: "before,off,on" },
  },
});
if (args.before === undefined) throw new Error("--before DIR: the tree to compare with");

const here = new URL("..", import.meta.url).pathname;
let exported = 0;
const receiver = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, async (req) => {
  exported += (await req.arrayBuffer()).byteLength;
  return new Response(null, { status: 200 });
});
const otel = {
  OTEL_DENO: "true",
  OTEL_SERVICE_NAME: "bench",
  OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${receiver.addr.port}`,
};

interface Variant {
  readonly name: string;
  readonly tree: string;
  readonly env: Record<string, string>;
}
const variants: Variant[] = [
  { name: "before", tree: args.before, env: {} },
  { name: "off", tree: here, env: {} },
  { name: "on", tree: here, env: otel },
].filter((v) => args.variants!.split(",").includes(v.name));

interface Figures {
  tasksPerSecond: number;
  serverMs: number;
  workerMs: number;
  /** Top-level statements per task: the same SQL sends the same number. */
  roundTrips: number;
  /** Statements run inside functions per task (pg_stat_statements, track = all). */
  nested: number;
  exportedBytes: number;
}
const results = new Map<string, Figures[]>();

async function runOnce(v: Variant): Promise<Figures> {
  const env = { ...Deno.env.toObject() };
  for (const key of Object.keys(env)) if (key.startsWith("OTEL_")) delete env[key];
  const bytes0 = exported;
  const out = await new Deno.Command("deno", {
    args: [
      "run",
      "-A",
      `${v.tree}/bench/profile.ts`,
      "--scenario",
      "chain",
      "--tasks",
      args.tasks!,
      "--reps",
      "1",
      "--top",
      "0",
    ],
    cwd: v.tree,
    env: { ...env, ...v.env },
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  if (!out.success) throw new Error(`${v.name}: ${new TextDecoder().decode(out.stderr)}`);
  const pick = (label: string) => Number(new RegExp(`${label} ([0-9.]+)`).exec(text)?.[1]);
  const tasks = Number(/; (\d+) tasks each/.exec(text)?.[1]);
  return {
    tasksPerSecond: pick("tasks/s"),
    serverMs: pick("server CPU ms/task"),
    workerMs: pick("worker CPU ms/task"),
    roundTrips: pick("round trips/task"),
    nested: pick("nested statements/task"),
    exportedBytes: (exported - bytes0) / tasks,
  };
}

const rounds = Number(args.rounds);
for (let round = 0; round < rounds; round++) {
  const order = variants.map((_, i) => variants[(i + round) % variants.length]);
  for (const v of order) {
    const f = await runOnce(v);
    console.error(
      `round ${round + 1} ${v.name}: ${f.tasksPerSecond} tasks/s, server ${f.serverMs} ms/task, ` +
        `worker ${f.workerMs} ms/task, ${f.roundTrips} round trips/task, ` +
        `${f.nested} nested statements/task, ` +
        `exported ${f.exportedBytes.toFixed(0)} B/task`,
    );
    results.set(v.name, [...(results.get(v.name) ?? []), f]);
  }
}
await receiver.shutdown();

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};
const cell = (xs: number[], d: number) =>
  `${median(xs).toFixed(d)} (${Math.min(...xs).toFixed(d)}–${Math.max(...xs).toFixed(d)})`;
console.log(
  `\n| variant | tasks/s | server CPU ms/task | worker CPU ms/task | round trips/task | nested statements/task | exported B/task |` +
    `\n|---|---:|---:|---:|---:|---:|---:|`,
);
for (const [name, fs] of results) {
  console.log(
    `| ${name} | ${cell(fs.map((f) => f.tasksPerSecond), 0)} | ${
      cell(fs.map((f) => f.serverMs), 3)
    } | ${cell(fs.map((f) => f.workerMs), 3)} | ${cell(fs.map((f) => f.roundTrips), 2)} | ${
      cell(fs.map((f) => f.nested), 1)
    } | ${cell(fs.map((f) => f.exportedBytes), 0)} |`,
  );
}
