/**
 * `deno task coverage [--queue NAME] [--stale-after SECONDS]`: prints the coverage check for the
 * database in `DATABASE_URL` (or `EDGE_WORKER_DB_URL`). Exits 1 when a needed pair has no live
 * worker, so it can gate a deploy script.
 *
 * @module
 */
import postgres from "npm:postgres@3.4.7";
import { formatCoverage, queueCoverage } from "./coverage.ts";

const USAGE = "usage: deno task coverage [--queue NAME] [--stale-after SECONDS]";

function parseArgs(args: string[]): { queue?: string; staleAfter: number } {
  const out: { queue?: string; staleAfter: number } = { staleAfter: 30 };
  for (let i = 0; i < args.length; i++) {
    const flag = args[i];
    const value = args[i + 1];
    if (flag === "--help" || flag === "-h") {
      console.log(USAGE);
      Deno.exit(0);
    } else if (flag === "--queue" && value) {
      out.queue = value;
      i++;
    } else if (flag === "--stale-after" && value && Number(value) > 0) {
      out.staleAfter = Number(value);
      i++;
    } else {
      console.error(`unknown or incomplete argument ${JSON.stringify(flag)}\n${USAGE}`);
      Deno.exit(2);
    }
  }
  return out;
}

if (import.meta.main) {
  const { queue, staleAfter } = parseArgs(Deno.args);
  const url = Deno.env.get("DATABASE_URL") ?? Deno.env.get("EDGE_WORKER_DB_URL");
  if (!url) {
    console.error("set DATABASE_URL to the database to check");
    Deno.exit(2);
  }
  const sql = postgres(url, { max: 1, prepare: false, onnotice: () => {} });
  try {
    const rows = await queueCoverage(sql, queue, staleAfter);
    console.log(formatCoverage(rows));
    const missing = rows.filter((r) => !r.served);
    if (missing.length > 0) {
      console.log(`\n${missing.length} pair(s) without a live worker`);
      Deno.exitCode = 1;
    }
  } finally {
    await sql.end();
  }
}
