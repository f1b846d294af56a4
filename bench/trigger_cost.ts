/**
 * `deno run -A bench/trigger_cost.ts [--rounds N] [--tasks N] [--sql FILE]`: what the run-event triggers
 * (supabase/schemas/0850_run_events.sql) cost the engine's SQL hot path, measured in one database
 * with the triggers enabled and disabled in alternating rounds, so machine noise hits both alike.
 * A round starts `tasks` single-step runs (one start_flow each), claims their tasks in batches of
 * 50 (pgmq.read + start_tasks, as read_and_claim does) and completes each batch with one
 * complete_tasks call. Prints the median time per task of each mode.
 *
 * @module
 */
import postgres from "postgres";
import { installPgmq } from "../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../src/cli/db/launcher.ts";
import { applyMigrations } from "../local/db_push.ts";

const arg = (name: string, fallback: number) => {
  const i = Deno.args.indexOf(name);
  return i >= 0 ? Number(Deno.args[i + 1]) : fallback;
};
const rounds = arg("--rounds", 10);
const tasks = arg("--tasks", 300);

const TRIGGERS = [
  ["pgflow.runs", "runs_inserted_notify"],
  ["pgflow.runs", "runs_status_notify"],
  ["pgflow.step_states", "step_states_status_notify"],
] as const;

const pg = await startLocalPostgres();
const sql = postgres(pg.url, { max: 2, onnotice: () => {} });
try {
  await installPgmq(sql);
  await applyMigrations(sql);
  // --sql FILE: SQL run after the migrations (to compare another version of the triggers).
  const extra = Deno.args.indexOf("--sql");
  if (extra >= 0) await sql.unsafe(Deno.readTextFileSync(Deno.args[extra + 1]));
  await sql`select pgflow.create_flow('tc_flow')`;
  await sql`select pgflow.add_step('tc_flow', 'a')`;
  const worker = crypto.randomUUID();
  await sql`select pgflow.register_worker(${worker}, 'tc_flow', 'bench')`;
  const perTask: Record<"on" | "off", number[]> = { on: [], off: [] };
  for (let round = 0; round < rounds * 2; round++) {
    // Pairs alternate their order (on/off, off/on, ...) so a drift in the machine cancels out.
    const pair = Math.floor(round / 2);
    const mode = (round + pair) % 2 === 0 ? "on" : "off";
    for (const [table, trigger] of TRIGGERS) {
      await sql.unsafe(
        `alter table ${table} ${mode === "on" ? "enable" : "disable"} trigger ${trigger}`,
      );
    }
    const t0 = performance.now();
    for (let i = 0; i < tasks; i++) await sql`select pgflow.start_flow('tc_flow', '{}')`;
    for (;;) {
      const msgs = await sql<{ msg_id: string }[]>`select msg_id from pgmq.read('tc_flow', 30, 50)`;
      if (msgs.length === 0) break;
      const rows = await sql<{ run_id: string; attempt: number }[]>`
        select run_id, attempt from pgflow.start_tasks('tc_flow', ${
        msgs.map((m) => m.msg_id)
      }::bigint[],
          ${worker}, '[["tc_flow", "a"]]') where disposition = 'claimed'`;
      await sql`select count(*) from pgflow.complete_tasks(${rows.map((r) => r.run_id)}::uuid[],
        ${rows.map(() => "a")}::text[], ${rows.map(() => 0)}::int[], ${
        rows.map(() => "1")
      }::jsonb[],
        ${rows.map((r) => r.attempt)}::int[])`;
    }
    perTask[mode].push((performance.now() - t0) * 1000 / tasks);
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
  console.log(
    `${rounds} pairs of rounds, ${tasks} tasks each; µs per task (start + claim + complete)`,
  );
  console.log(
    `triggers on:  median ${median(perTask.on).toFixed(0)}  (${
      perTask.on.map((x) => x.toFixed(0)).join(", ")
    })`,
  );
  console.log(
    `triggers off: median ${median(perTask.off).toFixed(0)}  (${
      perTask.off.map((x) => x.toFixed(0)).join(", ")
    })`,
  );
  const ratios = perTask.on.map((on, i) => on / perTask.off[i]);
  console.log(
    `on ÷ off, per pair: median ${median(ratios).toFixed(3)}  (${
      ratios.map((r) => r.toFixed(2)).join(", ")
    })`,
  );
} finally {
  await sql.end({ timeout: 1 });
  await pg.destroy();
}
