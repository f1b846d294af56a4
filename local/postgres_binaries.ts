/**
 * Finds a PostgreSQL server's binaries. The code lives with the CLI, which ships it
 * (`src/cli/db/binaries.ts`); this module keeps the old import path.
 *
 * @module
 */
export { findPostgresBinaries, type PostgresBinaries } from "../src/cli/db/binaries.ts";
