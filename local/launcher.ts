/**
 * Starts a throw-away PostgreSQL cluster for tests, the demo and the benchmarks. The code lives
 * with the CLI, which ships it (`src/cli/db/launcher.ts`); this module keeps the old import path.
 *
 * @module
 */
export {
  type LocalPostgres,
  startLocalPostgres,
  type StartOptions,
} from "../src/cli/db/launcher.ts";
