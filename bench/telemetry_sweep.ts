/**
 * What one call of `pgflow.sweep_ended_spans` costs, and how many calls a pass over the runs takes,
 * with many runs kept: a throw-away server holding `--runs` runs started over the last day (every
 * `--ended-every`th one ended with no span taken, the others' spans already emitted, as reports
 * leave them), then `--calls` sweeps timed one by one. The sweep looks at a page of runs per call,
 * so its time should follow the page, not the table.
 *
 *   deno run -A bench/telemetry_sweep.ts [--runs 200000] [--ended-every 100] [--calls 30]
 *
 * @module
 */
import postgres from "postgres";
import { parseArgs } from "node:util";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { applyMigrations } from "../local/db_push.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    runs: { type: "string", default: "200000" },
    "ended-every": { type: "string", default: "100" },
    calls: { type: "string", default: "30" },
  },
});
const runs = Number(args.runs);
const endedEvery = Number(args["ended-every"]);

const server = await startLocalPostgres();
try {
  const sql = postgres(server.url, { max: 1, onnotice: () => {} });
  await installPgmq(sql);
  await applyMigrations(sql);
  await sql`select pgflow.create_flow('sweep_bench')`;
  await sql`select pgflow.add_step('sweep_bench', 'only')`;
  // The sweep began before every run: all of them are its to look at.
  await sql`insert into pgflow.span_sweep (since) values (now() - interval '2 days')`;
  await sql`
    insert into pgflow.runs (flow_slug, status, input, started_at, completed_at, cancelled_at)
    select 'sweep_bench', case when i % ${endedEvery} = 0 then 'cancelled' else 'completed' end,
           '{}', now() - interval '1 day' + i * interval '1 day' / ${runs},
           case when i % ${endedEvery} = 0 then null
                else now() - interval '1 day' + i * interval '1 day' / ${runs} + interval '1 s' end,
           case when i % ${endedEvery} = 0
                then now() - interval '1 day' + i * interval '1 day' / ${runs} + interval '1 s' end
    from generate_series(1, ${runs}) i`;
  await sql`insert into pgflow.emitted_spans (run_id, step_slug)
            select run_id, '' from pgflow.runs where status = 'completed'`;
  await sql`vacuum analyze pgflow.runs`;
  await sql`vacuum analyze pgflow.emitted_spans`;

  const times: number[] = [];
  let spans = 0;
  let passes = 0;
  for (let i = 0; i < Number(args.calls); i++) {
    const t0 = performance.now();
    const rows = await sql`select * from pgflow.sweep_ended_spans()`;
    times.push(performance.now() - t0);
    spans += rows.length;
    const [cursor] = await sql`select scanned_at is null as restart from pgflow.span_sweep`;
    if (cursor.restart) passes++;
  }
  const sorted = [...times].sort((a, b) => a - b);
  console.log(
    `${runs} runs, every ${endedEvery}th ended with no span taken: ${times.length} calls of 1,000 ` +
      `runs each, ${sorted[sorted.length >> 1].toFixed(1)} ms per call (median; ` +
      `${sorted[0].toFixed(1)}–${sorted.at(-1)!.toFixed(1)}), ${spans} spans claimed, ` +
      `${passes} passes finished`,
  );
  await sql.end();
} finally {
  await server.destroy();
}
