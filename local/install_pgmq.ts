/**
 * Provides PGMQ's public API on a database (the extension, else `local/pgmq.sql`). The code lives
 * with the CLI, which ships it (`src/cli/db/pgmq.ts`); this module keeps the old import path.
 *
 * @module
 */
export { installPgmq, type PgmqSource } from "../src/cli/db/pgmq.ts";
