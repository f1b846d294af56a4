/**
 * What exact JSON costs the worker's CPU: `parseJsonb` (how the worker and the client read jsonb's
 * text) against `JSON.parse` and `jsonText` against `JSON.stringify`, per document, for a task's everyday input (fast path), documents that take the
 * exact parser (an escaped key, a long number), and large ones (1 MB of records, with and without
 * a long number). Interleaved rounds; prints the median of each.
 *
 * usage: deno run bench/json_cost.ts [--rounds N]
 *
 * @module
 */
import process from "node:process";
import { parseJsonb } from "../src/util/json_parse.ts";
import { jsonText } from "../src/util/json_write.ts";

const rounds = Number(Deno.args[Deno.args.indexOf("--rounds") + 1]) || 7;

function records(n: number, extra: string): string {
  const items = Array.from(
    { length: n },
    (_, i) =>
      `{"id": "3e5c1e45-8b3a-4c1e-9e2f-${String(i).padStart(12, "0")}", "name": "user ${i}", ` +
      `"note": "line one\\nline two", "score": ${
        i * 0.25
      }, "tags": ["a", "b"], "active": true${extra}}`,
  );
  return `[${items.join(", ")}]`;
}

const documents: [string, string][] = [
  ["task input (small)", '{"run": {"threadId": "t1", "text": "site is down"}, "classify": 3}'],
  ["escaped key (small)", '{"headers": {"x\\tkey": 1}, "n": 2}'],
  ["long number (small)", '{"orderId": 12345678901234567890, "n": 2}'],
  ["1 MB of records", records(5_000, "")],
  [
    "1 MB, one long number",
    records(5_000, "").replace('"score": 0', '"score": 0.12345678901234567'),
  ],
  ["1 MB, escaped keys", records(5_000, ', "a\\tb": 1')],
];

/** CPU nanoseconds per call of `fn` (the process's user and system time: a busy machine's waits
 * for a core do not count), over about 50 ms of CPU. */
function time(fn: () => unknown): number {
  const cpu = () => {
    const { user, system } = process.cpuUsage();
    return (user + system) / 1000;
  };
  let n = 0;
  const start = cpu();
  let elapsed = 0;
  do {
    // In batches: reading the CPU time costs about a microsecond itself.
    for (let i = 0; i < 64; i++) fn();
    n += 64;
    elapsed = cpu() - start;
  } while (elapsed < 50);
  return (elapsed * 1e6) / n;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const show = (ns: number) => ns < 1e4 ? `${Math.round(ns)} ns` : `${(ns / 1e6).toFixed(2)} ms`;

console.log(
  `Deno ${Deno.version.deno}, V8 ${Deno.version.v8}; CPU time, median of ${rounds} rounds`,
);
console.log(
  "document                   size     JSON.parse  parseJsonb  ratio   JSON.stringify  jsonText  ratio",
);
for (const [name, text] of documents) {
  const value = parseJsonb(text);
  const cost = {
    parse: [] as number[],
    exact: [] as number[],
    str: [] as number[],
    text: [] as number[],
  };
  for (let r = 0; r < rounds; r++) {
    cost.parse.push(time(() => JSON.parse(text)));
    cost.exact.push(time(() => parseJsonb(text)));
    cost.str.push(time(() => JSON.stringify(value)));
    cost.text.push(time(() => jsonText(value)));
  }
  const [p, e, s, t] = [cost.parse, cost.exact, cost.str, cost.text].map(median);
  console.log(
    `${name.padEnd(25)}${String(text.length).padStart(8)}  ${show(p).padStart(11)} ${
      show(e).padStart(11)
    } ${(e / p).toFixed(2).padStart(6)}×  ${show(s).padStart(14)} ${show(t).padStart(9)} ${
      (t / s).toFixed(2).padStart(6)
    }×`,
  );
}
