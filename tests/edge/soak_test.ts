/**
 * The Edge soak, compressed for the suite (soak.ts says what it does and checks): runs stream
 * through two shared queues for at least 45 s and until isolates have ended at least 30 times,
 * by every reason; then every invariant must hold. `deno task soak:edge [seconds]` runs it longer.
 */
import assert from "node:assert/strict";
import { runEdgeSoak } from "./soak.ts";

Deno.test("Edge soak: hand-overs by every reason lose no run, run nothing twice, start nothing after beforeunload", async () => {
  const figures = await runEdgeSoak({
    minSeconds: 45,
    minEnds: 30,
    maxSeconds: 90,
    runsPerSecond: 3,
    stormPerSecond: 12,
  });
  console.log(JSON.stringify(figures));
  assert.deepEqual(figures.problems, []);
  const ends = Object.entries(figures.ends)
    .filter(([cause]) => cause !== "supervisor stopped")
    .reduce((n, [, count]) => n + count, 0);
  assert.ok(ends >= 30, `${ends} isolate ends`);
});
