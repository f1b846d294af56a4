/**
 * The engine beside its peers, from the headline cells of one run: the ratios of each comparison
 * and issue 48's targets (item 2), each a row ending in yes or no.
 */
import type { CellKey, CellResult, TableState } from "./cells.ts";
import { fixed, ratio } from "./stats.ts";

/** A cell's median across rounds of one figure; NaN when the cell did not run. */
export type CellMedian = (key: CellKey, pick: (r: CellResult) => number) => number;

/** One target: what it asks, what was measured, and whether it was met. */
export interface PeerTarget {
  readonly name: string;
  readonly measured: string;
  readonly met: boolean;
}

const STATES: readonly TableState[] = ["fresh", "used"];

/** The peers' cells, single-step and chain, as the ratios and targets compare them. */
const PEERS: readonly { single: CellKey; chain: CellKey; label: string }[] = [
  { single: "graphile", chain: "graphileChain", label: "graphile-worker" },
  { single: "pgboss", chain: "pgbossChain", label: "pg-boss" },
  { single: "dbosQueued", chain: "dbosQueuedChain", label: "DBOS queued" },
  { single: "dbosDirect", chain: "dbosDirectChain", label: "DBOS started directly" },
];

const perSec = (state: TableState) => (r: CellResult) => r[state].perSec;
const p50 = (r: CellResult) => r.p50;

/**
 * The ratio rows: this engine ÷ each peer, throughput on fresh and used tables, latencies (p50)
 * on used ones. Rows whose cells did not run are left out.
 *
 * @example
 * ```ts
 * peerRatioRows(() => NaN); // no cell ran: no rows
 * ```
 */
export function peerRatioRows(m: CellMedian): string[][] {
  const rows: string[][] = [];
  const throughput = (a: CellKey, b: CellKey, label: string) => {
    const [fr, us] = STATES.map((st) => m(a, perSec(st)) / m(b, perSec(st)));
    if (Number.isFinite(fr) || Number.isFinite(us)) rows.push([label, ratio(fr), ratio(us)]);
  };
  const latency = (a: CellKey, b: CellKey, label: string) => {
    const [x, y] = [m(a, p50), m(b, p50)];
    if (Number.isFinite(x / y)) {
      rows.push([label, "–", `${ratio(x / y)} (${fixed(x)} vs ${fixed(y)} ms)`]);
    }
  };
  for (const p of PEERS) {
    throughput("engine", p.single, `single-step: this engine ÷ ${p.label} (tasks/s)`);
    throughput("engineChain", p.chain, `3-step chain: this engine ÷ ${p.label} (runs/s)`);
  }
  throughput(
    "engineDefaults",
    "graphile",
    "single-step: this engine at its public defaults ÷ graphile-worker (tasks/s)",
  );
  throughput(
    "engineDefaults",
    "engine",
    "single-step: this engine at its public defaults ÷ with the bench's settings",
  );
  throughput("graphile", "graphileDeno", "graphile-worker 0.18 on Node ÷ 0.16.6 in Deno");
  const [fr, us] = STATES.map((st) =>
    m("engine", (r) => r[st].withStartPerSec) / m("graphile", (r) => r[st].withStartPerSec)
  );
  if (Number.isFinite(fr) || Number.isFinite(us)) {
    rows.push([
      "single-step counting the start (start + drain): this engine ÷ graphile-worker",
      ratio(fr),
      ratio(us),
    ]);
  }
  for (const p of PEERS) {
    latency("engine", p.single, `pickup p50: this engine ÷ ${p.label}`);
    latency("engineChain", p.chain, `unloaded 3-step run p50: this engine ÷ ${p.label}`);
  }
  return rows;
}

/**
 * Issue 48's targets (item 2), on fresh and on used tables, one worker: 3-step chain runs/s
 * ≥ 3.5× DBOS queued and ≥ 1.75× graphile-worker 0.18; single-step ≥ 1.0× graphile-worker
 * 0.18 (for the engine with the bench's settings and at its public defaults); unloaded chain p50
 * and pickup p50 ≤ 1.2× graphile-worker's. A target whose cells did not run is not met. Item 1
 * (every peer beside the engine, each cell checked exactly-once) comes first.
 *
 * @example
 * ```ts
 * const none = issue48Targets(() => NaN, []); // every target "not measured in this run"
 * console.log(none.map((t) => `${t.name}: ${t.met ? "yes" : "no"}`).join("\n"));
 * ```
 */
export function issue48Targets(m: CellMedian, ran: readonly CellKey[]): PeerTarget[] {
  const out: PeerTarget[] = [];
  const wanted: CellKey[] = [
    "engine",
    "engineChain",
    ...PEERS.flatMap((p) => [p.single, p.chain]),
  ];
  const missing = wanted.filter((k) => !ran.includes(k));
  out.push({
    name:
      "1. DBOS (queued, direct), pg-boss, graphile-worker 0.18 beside the engine, single-step " +
      "and 3-step, each cell checked exactly-once",
    measured: missing.length === 0
      ? `all ${wanted.length} cells, each database checked`
      : `not in this run: ${missing.join(", ")}`,
    met: missing.length === 0,
  });
  const atLeast = (name: string, a: CellKey, b: CellKey, min: number, unit: string) => {
    for (const st of STATES) {
      const [x, y] = [m(a, perSec(st)), m(b, perSec(st))];
      const r = x / y;
      out.push({
        name: `2. ${name}, ${st} tables: ≥ ${min}×`,
        measured: Number.isFinite(r)
          ? `${ratio(r)} (${fixed(x, 0)} vs ${fixed(y, 0)} ${unit})`
          : "not measured in this run",
        met: r >= min,
      });
    }
  };
  atLeast("3-step chain ÷ DBOS queued", "engineChain", "dbosQueuedChain", 3.5, "runs/s");
  atLeast("3-step chain ÷ graphile-worker 0.18", "engineChain", "graphileChain", 1.75, "runs/s");
  atLeast("single-step ÷ graphile-worker 0.18", "engine", "graphile", 1.0, "tasks/s");
  atLeast(
    "single-step at the public defaults ÷ graphile-worker 0.18",
    "engineDefaults",
    "graphile",
    1.0,
    "tasks/s",
  );
  const atMost = (name: string, a: CellKey, b: CellKey) => {
    const [x, y] = [m(a, p50), m(b, p50)];
    const r = x / y;
    out.push({
      name: `2. ${name} ≤ 1.2× graphile-worker 0.18's (used tables)`,
      measured: Number.isFinite(r)
        ? `${ratio(r)} (${fixed(x)} vs ${fixed(y)} ms)`
        : "not measured in this run",
      met: r <= 1.2,
    });
  };
  atMost("unloaded 3-step run p50", "engineChain", "graphileChain");
  atMost("pickup p50", "engine", "graphile");
  return out;
}
