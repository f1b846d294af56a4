/**
 * A test-only pause that widens a race window of `pgflow db start` so a test can hit it every time:
 * `PGFLOW_DB_TEST_PAUSE=<point>:<ms>`. Unset (always, outside the tests), it does nothing.
 *
 * @module
 */

/**
 * Where `pgflow db start` can pause: before it makes the cluster's `data` folder (`initdb`), after
 * initdb and before the cluster is recorded as made (`record`), before the server binds its port
 * (`bind`), or after the server started and before PGMQ and the migrations (`setup`).
 *
 * @example
 * ```ts
 * import type { PausePoint } from "./test_pause.ts";
 *
 * const point: PausePoint = "setup";
 * ```
 */
export type PausePoint = "initdb" | "record" | "bind" | "setup";

/**
 * Sleeps when `PGFLOW_DB_TEST_PAUSE` names `point`.
 *
 * @example
 * ```ts
 * import { testPause } from "./test_pause.ts";
 *
 * await testPause("setup"); // PGFLOW_DB_TEST_PAUSE=setup:5000 sleeps 5 s here
 * ```
 */
export async function testPause(point: PausePoint): Promise<void> {
  const [at, ms] = (Deno.env.get("PGFLOW_DB_TEST_PAUSE") ?? "").split(":");
  if (at === point) await new Promise((resolve) => setTimeout(resolve, Number(ms)));
}
