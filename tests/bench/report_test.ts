/** The benchmark's arithmetic: medians and spreads across rounds, and the scale-out target. */
import assert from "node:assert/strict";
import { combine, Rounds, spread, spreadCell } from "../../bench/repeat.ts";
import { aheadAtEveryCount, scaleHolds } from "../../bench/report.ts";
import { parseOptions } from "../../bench/options.ts";

Deno.test("spread: median and lowest–highest across rounds; one round shows the figure alone", () => {
  assert.deepEqual(spread([3, 1, 2, NaN]), { median: 2, min: 1, max: 3, n: 3 });
  assert.equal(spreadCell(spread([655, 584, 702]), 0), "655 (584–702)");
  assert.equal(spreadCell(spread([6.25]), 1), "6.3");
});

Deno.test("rounds keep scenarios in first-seen order; combine takes the spread of numbers only", () => {
  const rounds = new Rounds<{ name: string; tasksPerSec: number }>();
  rounds.add("b", { name: "b", tasksPerSec: 10 });
  rounds.add("a", { name: "a", tasksPerSec: 1 });
  rounds.add("b", { name: "b", tasksPerSec: 30 });
  rounds.add("b", { name: "b", tasksPerSec: 20 });
  assert.deepEqual(rounds.entries().map(([n]) => n), ["b", "a"]);
  const b = combine(rounds.entries()[0][1]);
  assert.equal(b.name, "b");
  assert.deepEqual(b.tasksPerSec, { median: 20, min: 10, max: 30, n: 3 });
});

Deno.test("scale-out holds unless a point falls below 0.9× the best with fewer workers", () => {
  const at = (pairs: [number, number][]) =>
    pairs.map(([workers, tasksPerSec]) => ({ workers, tasksPerSec }));
  assert.equal(scaleHolds(at([[1, 100], [2, 180], [4, 175]])).met, true);
  const fell = scaleHolds(at([[4, 150], [1, 100], [2, 200]]));
  assert.equal(fell.met, false);
  assert.equal(fell.worst, 0.75);
});

Deno.test("scale-out against the peer: the worst ratio over the worker counts both ran", () => {
  const at = (pairs: [number, number][]) =>
    pairs.map(([workers, tasksPerSec]) => ({ workers, tasksPerSec }));
  assert.deepEqual(aheadAtEveryCount(at([[1, 110], [2, 150]]), at([[1, 100], [2, 200], [4, 9]])), {
    worst: 0.75,
    met: false,
  });
  assert.equal(aheadAtEveryCount(at([[1, 110]]), at([[1, 100]]))?.met, true);
  assert.equal(aheadAtEveryCount(at([[1, 110]]), at([[2, 100]])), undefined);
});

Deno.test("bench options: --repeat and the chain and scale-out settings", () => {
  const o = parseOptions(["--repeat", "5", "--scale-workers", "1,4", "--chain-rate", "10"], "x.md");
  assert.equal(o.repeat, 5);
  assert.deepEqual(o.scaleWorkers, [1, 4]);
  assert.equal(o.chainRate, 10);
  const quick = parseOptions(["--quick"], "x.md");
  assert.deepEqual(quick.scaleWorkers, [1, 4, 8]);
  assert.equal(quick.repeat, 1);
  assert.equal(parseOptions([], "x.md").repeat, 3);
  const full = parseOptions([], "x.md");
  assert.deepEqual(full.scaleWorkers, [1, 4, 8, 16]);
  assert.equal(full.drainSeconds, 10);
  assert.equal(full.cells.length, 12);
  assert.equal(full.cells.includes("graphileDeno"), false);
  assert.equal(full.dbosPollMs, 50);
});

Deno.test("bench options: --drain-seconds, --cells and --scale-seconds", () => {
  const o = parseOptions(
    ["--drain-seconds", "20", "--cells", "engine,graphile", "--scale-seconds", "5"],
    "x.md",
  );
  assert.equal(o.drainSeconds, 20);
  assert.deepEqual(o.cells, ["engine", "graphile"]);
  assert.equal(o.scaleSeconds, 5);
});
