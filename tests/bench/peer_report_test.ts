/** The engine beside its peers: the ratio rows and issue 48's targets, from the cells' medians. */
import assert from "node:assert/strict";
import type { CellKey, CellResult } from "../../bench/cells.ts";
import { type CellMedian, issue48Targets, peerRatioRows } from "../../bench/peer_report.ts";

/** A CellMedian over one result per cell: tasks or runs/s on both table states, and a p50. */
function medians(cells: Partial<Record<CellKey, [perSec: number, p50: number]>>): CellMedian {
  return (key, pick) => {
    const c = cells[key];
    if (c === undefined) return NaN;
    const drain = { units: 1, seconds: 1, perSec: c[0], tasksPerSec: c[0], cpuMsPerTask: 0 };
    const r = {
      key,
      fresh: { ...drain, startCpuMsPerTask: 0 },
      used: { ...drain, startCpuMsPerTask: 0 },
      p50: c[1],
    } as unknown as CellResult;
    return pick(r);
  };
}

const ALL: Partial<Record<CellKey, [number, number]>> = {
  engine: [2700, 2.0],
  engineDefaults: [2600, 2.2],
  engineChain: [700, 9.0],
  graphile: [2676, 2.3],
  graphileChain: [340, 9.1],
  pgboss: [1500, 3.0],
  pgbossChain: [300, 12],
  dbosQueued: [170, 38.8],
  dbosQueuedChain: [172, 40.0],
  dbosDirect: [400, 1.0],
  dbosDirectChain: [235, 9.4],
};

Deno.test("issue 48's targets: a row per target and table state, each yes or no", () => {
  const t = issue48Targets(medians(ALL), Object.keys(ALL) as CellKey[]);
  const verdict = (prefix: string) => t.filter((x) => x.name.startsWith(prefix)).map((x) => x.met);
  assert.equal(t.length, 11);
  assert.deepEqual(verdict("1."), [true]);
  // 700 ÷ 172 = 4.07 ≥ 3.5; 700 ÷ 340 = 2.06 ≥ 1.75; 2700 ÷ 2676 = 1.01 ≥ 1.0; 2600 < 2676.
  assert.deepEqual(verdict("2. 3-step chain ÷ DBOS queued"), [true, true]);
  assert.deepEqual(verdict("2. 3-step chain ÷ graphile"), [true, true]);
  assert.deepEqual(verdict("2. single-step ÷ graphile"), [true, true]);
  assert.deepEqual(verdict("2. single-step at the public defaults"), [false, false]);
  // 9.0 ÷ 9.1 ≤ 1.2; 2.0 ÷ 2.3 ≤ 1.2.
  assert.deepEqual(verdict("2. unloaded"), [true]);
  assert.deepEqual(verdict("2. pickup"), [true]);
  assert.match(
    t.find((x) => x.name.startsWith("2. pickup"))!.measured,
    /^0\.87× \(2\.0 vs 2\.3 ms\)$/,
  );
});

Deno.test("issue 48's targets: a cell that did not run leaves its targets unmet, saying so", () => {
  const { dbosQueuedChain: _gone, ...rest } = ALL;
  const t = issue48Targets(medians(rest), Object.keys(rest) as CellKey[]);
  const first = t[0];
  assert.equal(first.met, false);
  assert.match(first.measured, /not in this run: dbosQueuedChain/);
  const dbos = t.filter((x) => x.name.includes("DBOS queued"));
  assert.deepEqual(dbos.map((x) => [x.measured, x.met]), [
    ["not measured in this run", false],
    ["not measured in this run", false],
  ]);
});

Deno.test("peer ratios: the engine ÷ each peer that ran, latencies on used tables only", () => {
  const rows = peerRatioRows(medians({ engine: [2000, 2], graphile: [1000, 4] }));
  assert.deepEqual(rows, [
    ["single-step: this engine ÷ graphile-worker (tasks/s)", "2.00×", "2.00×"],
    ["pickup p50: this engine ÷ graphile-worker", "–", "0.50× (2.0 vs 4.0 ms)"],
  ]);
  assert.deepEqual(peerRatioRows(() => NaN), []);
});
