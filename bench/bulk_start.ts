/**
 * Starting many runs: `pgflow.start_flows` (one call) against as many `pgflow.start_flow` calls,
 * on a durable throw-away server (fsync and synchronous_commit on; or `DATABASE_URL`). Each
 * round starts `--runs` single-step runs four ways, in a rotating order, each on a flow of its
 * own created for the cell (fresh tables) and deleted after it:
 *
 * - `single`: one `start_flow` call per run, each its own transaction, awaited in turn (a loop in
 *   a producer);
 * - `client`: `client.startFlow` per run, awaited in turn (the same through the typed client);
 * - `loop`: one statement calling `start_flow` per run (one transaction: no commit per run);
 * - `bulk`: one `start_flows` call with every input;
 * - `clientBulk`: one `client.startFlows` call.
 *
 * Prints, per way, the median time (spread) of the rounds, runs/s, the WAL written and the ratio
 * to `bulk`, as markdown; with `--write`, into `bench/results.md`'s bulk block. Nothing is
 * asserted.
 *
 * `deno run -A bench/bulk_start.ts [--runs 10000] [--rounds 3] [--ways single,client,loop,bulk,clientBulk]`
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createClient } from "../mod.ts";
import { median } from "./stats.ts";
import { writeResultsBlock } from "./results_block.ts";

const arg = (name: string, fallback: number): number => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Number(Deno.args[i + 1]) : fallback;
};
const RUNS = arg("--runs", 10_000);
const ROUNDS = arg("--rounds", 3);
const WRITE = Deno.args.includes("--write");
const out: string[] = [];
const print = (line = "") => {
  console.log(line);
  out.push(line);
};

type Way = "single" | "client" | "loop" | "bulk" | "clientBulk";
const ALL_WAYS: readonly Way[] = ["single", "client", "loop", "bulk", "clientBulk"];
/** `--ways single,bulk`: only these (default: all but `client`, which is `single` and a client). */
const waysArg = Deno.args.indexOf("--ways");
const WAYS: readonly Way[] = waysArg >= 0
  ? Deno.args[waysArg + 1].split(",").map((w) => {
    if (!ALL_WAYS.includes(w as Way)) throw new Error(`--ways: ${w} is not one of ${ALL_WAYS}`);
    return w as Way;
  })
  : ALL_WAYS.filter((w) => w !== "client");
const LABEL: Record<Way, string> = {
  single: "`start_flow` per run, a transaction each (SQL, awaited in turn)",
  client: "`client.startFlow` per run, awaited in turn",
  loop: "`start_flow` per run in one statement (one transaction)",
  bulk: "`start_flows`, one call",
  clientBulk: "`client.startFlows`, one call",
};

/** The lowest–highest of `xs`, with `digits` decimals. */
const spread = (xs: readonly number[], digits: number): string =>
  `${Math.min(...xs).toFixed(digits)}–${Math.max(...xs).toFixed(digits)}`;

const db = await openPgflowDatabase({ durable: true });
const sql = postgres(db.url, { max: 2, onnotice: () => {} });
const client = createClient({ connectionString: db.url, pool: { max: 1 } });
const inputs = Array.from({ length: RUNS }, (_, n) => ({ n }));
const seconds: Record<Way, number[]> = {
  single: [],
  client: [],
  loop: [],
  bulk: [],
  clientBulk: [],
};
const walMb: Record<Way, number[]> = { single: [], client: [], loop: [], bulk: [], clientBulk: [] };

async function start(way: Way, slug: string): Promise<void> {
  switch (way) {
    case "single":
      for (const input of inputs) {
        await sql`select run_id from pgflow.start_flow(${slug}, ${sql.json(input)})`;
      }
      return;
    case "client":
      for (const input of inputs) await client.startFlow(slug, input);
      return;
    case "loop":
      await sql`select count(r.run_id) from generate_series(0, ${RUNS - 1}::int) g,
                lateral pgflow.start_flow(${slug}, jsonb_build_object('n', g)) r`;
      return;
    case "bulk":
      await sql`select cardinality(run_ids) from pgflow.start_flows(${slug}, ${sql.json(inputs)})`;
      return;
    case "clientBulk":
      await client.startFlows(slug, inputs);
      return;
  }
}

try {
  for (let round = 0; round < ROUNDS; round++) {
    // A rotating order, so a drift of the machine falls on every way alike.
    const order = WAYS.map((_, i) => WAYS[(i + round) % WAYS.length]);
    for (const way of order) {
      const slug = `bulk_${way.toLowerCase()}_${round}`;
      await sql`select pgflow.create_flow(${slug})`;
      await sql`select pgflow.add_step(${slug}, 'a')`;
      await sql`checkpoint`;
      const [{ lsn: before }] = await sql`select pg_current_wal_lsn()::text as lsn`;
      const t0 = performance.now();
      await start(way, slug);
      const elapsed = (performance.now() - t0) / 1000;
      const [{ bytes }] = await sql`
        select pg_wal_lsn_diff(pg_current_wal_lsn(), ${before}::pg_lsn)::float8 as bytes`;
      const [{ n }] =
        await sql`select count(*)::int as n from pgflow.runs where flow_slug = ${slug}`;
      if (n !== RUNS) throw new Error(`${way}: ${n} runs started, expected ${RUNS}`);
      seconds[way].push(elapsed);
      walMb[way].push(bytes / 2 ** 20);
      console.error(
        `round ${round + 1} ${way}: ${elapsed.toFixed(2)} s, ${
          (bytes / 2 ** 20).toFixed(1)
        } MB WAL`,
      );
      await sql`select pgflow.delete_flow_and_data(${slug})`;
    }
  }
  const bulk = median(seconds.bulk.length > 0 ? seconds.bulk : seconds.clientBulk);
  print(
    `| starting ${
      RUNS.toLocaleString("en")
    } single-step runs (durable server, ${ROUNDS} rounds) | s | runs/s | WAL MB | × bulk time |`,
  );
  print("|---|---:|---:|---:|---:|");
  for (const way of ALL_WAYS.filter((w) => WAYS.includes(w))) {
    const s = median(seconds[way]);
    print(
      `| ${LABEL[way]} | ${s.toFixed(2)} (${spread(seconds[way], 2)}) | ${
        Math.round(RUNS / s)
      } | ` +
        `${median(walMb[way]).toFixed(1)} | ${(s / bulk).toFixed(1)}× |`,
    );
  }
  const ratio = median(seconds.single) / bulk;
  print();
  print("| target | measured | met |");
  print("|---|---:|---:|");
  print(
    `| bulk start of ${RUNS.toLocaleString("en")} runs ≥ 10× faster than as many single starts | ` +
      `${ratio.toFixed(1)}× (${median(seconds.single).toFixed(2)} vs ${bulk.toFixed(2)} s) | ${
        ratio >= 10 ? "yes" : "**no**"
      } |`,
  );
  if (WRITE) {
    writeResultsBlock("bulk", `deno run -A bench/bulk_start.ts ${Deno.args.join(" ")}`, out);
  }
} finally {
  await client.close();
  await sql.end({ timeout: 5 });
  await db.close();
}
