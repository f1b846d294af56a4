/** The headline cells' and the server probe's pure parts: /proc parsing, drain sizing. */
import assert from "node:assert/strict";
import { notifyWaitShare, parseStat } from "../../bench/server_probe.ts";
import { MARGIN, Rates } from "../../bench/cells.ts";

Deno.test("parseStat: ppid and utime+stime+cutime+cstime, a command name with spaces and ')'", () => {
  // Fields 1..17 of /proc/<pid>/stat; utime 14, stime 15, cutime 16, cstime 17.
  const line = "4242 (postgres: a) b) S 4000 4242 4242 0 -1 4194560 100 0 0 0 " +
    "250 70 8 2 20 0 1 0 123 456 789";
  assert.deepEqual(parseStat(line), { ppid: 4000, ticks: 250 + 70 + 8 + 2 });
  assert.equal(parseStat("1 (x) S 0"), undefined);
});

Deno.test("notifyWaitShare: waiting ÷ active over the samples; NaN without an active sample", () => {
  const r = {
    cpuMs: 0,
    producersCpuMs: 0,
    samples: 10,
    active: 40,
    notifyWaiting: 10,
    objectWaitEvents: 12,
  };
  assert.equal(notifyWaitShare(r), 0.25);
  assert.ok(Number.isNaN(notifyWaitShare({ ...r, active: 0, notifyWaiting: 0 })));
});

Deno.test("Rates: a drain sized from the last rate, else the fallback's, else the guess", () => {
  const rates = new Rates();
  const m = (n: number) => Math.round(n * MARGIN);
  assert.equal(rates.size("engine/used", 10, 3000, "engine/fresh"), m(30_000));
  rates.note("engine/fresh", 2500);
  assert.equal(rates.size("engine/used", 10, 3000, "engine/fresh"), m(25_000));
  rates.note("engine/used", 4000);
  assert.equal(rates.size("engine/used", 2, 3000, "engine/fresh"), m(8000));
  rates.note("engine/used", 1000);
  rates.note("engine/used", NaN);
  assert.equal(rates.size("engine/used", 2, 3000, "engine/fresh"), m(2000));
  assert.equal(rates.has("engine/used"), true);
  assert.equal(rates.size("x", 0.001, 10), 100);
});
