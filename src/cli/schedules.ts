/**
 * `pgflow schedules list|create|pause|resume|delete`: the schedules of a database, each starting
 * a flow (or an alias) on a cron expression or an interval, one run per tick; and managing them,
 * as `pgflow.create_schedule`, `pause_schedule`, `resume_schedule` and `delete_schedule` do.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import { parseJsonb } from "../util/json_parse.ts";
import type { ParsedArgs } from "./args.ts";
import { CliError, command, result, UsageError } from "./output.ts";
import { runSubcommand } from "./subcommands.ts";

/** The help text of `pgflow schedules`. */
export const SCHEDULES_HELP = `pgflow schedules <list | create | pause | resume | delete> [flags]

  list                      every schedule: its flow, timing, next and last tick, last run [--json]
  create NAME FLOW          start FLOW (a flow or an alias) on a schedule:
         (--cron EXPR [--time-zone TZ] | --every INTERVAL)
         [--input JSON] [--tick-key KEY] [--catch-up N] [--paused] [--json]
  pause NAME                no tick fires until it is resumed [--json]
  resume NAME               fire again from the next tick after now [--json]
  delete NAME               delete the schedule and its tick history (its runs stay) [--json]

A tick starts exactly one run, whoever fires it: pg_cron's job (pgflow.schedule_maintenance())
and every worker (scheduleTickIntervalMs) fire due ticks. After an outage the latest --catch-up
ticks start runs (default 1: only the latest); ticks less than 10 s late always do.

  --cron EXPR         five fields: minute hour day-of-month month day-of-week ('0 9 * * mon-fri')
  --time-zone TZ      the wall clock the cron expression is read on (default UTC), e.g. Europe/Paris
  --every INTERVAL    a fixed interval of whole seconds instead of cron ('1 second', '15 minutes')
  --input JSON        each run's input (default {})
  --tick-key KEY      add the tick's time (ISO 8601, UTC) to the input under KEY
  --catch-up N        after an outage, start up to the N latest missed ticks (default 1)
  --paused            create it paused
  --database-url URL  the database (default: EDGE_WORKER_DB_URL, then DATABASE_URL)
  --json              one JSON object on stdout

Exit codes: 0 done, 1 refused (a bad expression, time zone or flow: the message says which) or
failed, 2 usage error, 3 no such schedule (list: no schedule).`;

/** One schedule as `pgflow.list_schedules()` gives it. */
interface ScheduleRow {
  readonly schedule: string;
  readonly flow: string;
  readonly cron: string | null;
  readonly every_seconds: number | null;
  readonly time_zone: string;
  readonly paused: boolean;
  readonly next_tick_at: string | null;
  readonly last_tick_at: string | null;
  readonly last_run_id: string | null;
  readonly last_error: string | null;
  readonly skipped_ticks: number;
}

/**
 * Runs `pgflow schedules …`; returns the exit code.
 *
 * @example
 * ```ts
 * import { schedules } from "./schedules.ts";
 *
 * // Deno.exit(await schedules(["create", "nightly", "report", "--cron", "0 2 * * *"]));
 * ```
 */
export function schedules(argv: readonly string[]): Promise<number> {
  const one = (sub: string) => ({
    arguments: 1,
    usage:
      `pgflow schedules ${sub} needs the schedule's name, e.g. pgflow schedules ${sub} nightly`,
  });
  return runSubcommand("schedules", SCHEDULES_HELP, {
    list: { arguments: 0, run: list },
    create: {
      flags: {
        "cron": "string",
        "time-zone": "string",
        "every": "string",
        "input": "string",
        "tick-key": "string",
        "catch-up": "string",
        "paused": "boolean",
      },
      arguments: 2,
      usage: "pgflow schedules create needs a name and a flow (or alias), e.g. " +
        "pgflow schedules create nightly report --cron '0 2 * * *'",
      run: create,
    },
    pause: { ...one("pause"), run: (sql, args) => change(sql, args, "pause") },
    resume: { ...one("resume"), run: (sql, args) => change(sql, args, "resume") },
    delete: { ...one("delete"), run: remove },
  }, argv);
}

function timing(row: ScheduleRow): string {
  if (row.cron === null) return `every ${row.every_seconds} s`;
  return row.time_zone === "UTC" ? row.cron : `${row.cron} (${row.time_zone})`;
}

async function list(sql: Sql, args: ParsedArgs): Promise<number> {
  const rows = (await sql<{ s: ScheduleRow }[]>`select s from pgflow.list_schedules() as s`)
    .map((r) => r.s);
  if (args.booleans.has("json")) {
    result(JSON.stringify({ schedules: rows }));
  } else if (rows.length === 0) {
    result(`no schedules: \`${command("schedules create NAME FLOW --cron EXPR")}\` makes one`);
  } else {
    const table = [
      ["schedule", "flow", "timing", "next tick", "last tick", "last run", "skipped", "error"],
      ...rows.map((r) => [
        r.schedule,
        r.flow,
        timing(r),
        r.paused ? "paused" : r.next_tick_at ?? "-",
        r.last_tick_at ?? "-",
        r.last_run_id ?? "-",
        String(r.skipped_ticks),
        r.last_error ?? "-",
      ]),
    ];
    const widths = table[0].map((_, i) => Math.max(...table.map((row) => row[i].length)));
    for (const row of table) {
      result(row.map((cell, i) => cell.padEnd(widths[i])).join("  ").trimEnd());
    }
  }
  return rows.length === 0 ? 3 : 0;
}

/** The database's refusal, as the command's: the message and its hint. */
function refused(error: unknown): never {
  const e = error as { code?: string; message?: string; hint?: string };
  if (!["22023", "23505", "P0002"].includes(e.code ?? "")) throw error;
  throw new CliError(`${e.message}${e.hint ? `; ${e.hint}` : ""}`);
}

function integer(value: string | undefined, flag: string): number | null {
  if (value === undefined) return null;
  if (!/^\d+$/.test(value)) throw new UsageError(`${flag} takes a whole number, got ${value}`);
  return Number(value);
}

async function create(sql: Sql, args: ParsedArgs): Promise<number> {
  const [name, flow] = args.positionals;
  const cron = args.strings.cron ?? null;
  const every = args.strings.every ?? null;
  if ((cron === null) === (every === null)) {
    throw new UsageError(
      "pgflow schedules create needs --cron EXPR (e.g. '*/5 * * * *') or --every INTERVAL " +
        "(e.g. '10 seconds'), not both",
    );
  }
  const inputText = args.strings.input ?? "{}";
  try {
    parseJsonb(inputText);
  } catch (error) {
    throw new UsageError(`--input is not JSON (${(error as Error).message}): ${inputText}`);
  }
  const catchUp = integer(args.strings["catch-up"], "--catch-up") ?? 1;
  let row: ScheduleRow;
  try {
    [{ s: row }] = await sql<{ s: ScheduleRow }[]>`
      select pgflow.create_schedule(${name}, ${flow}, cron => ${cron}::text,
        input => ${inputText}::text::jsonb, time_zone => ${args.strings["time-zone"] ?? "UTC"},
        every => ${every}::interval, tick_key => ${args.strings["tick-key"] ?? null}::text,
        catch_up => ${catchUp}, paused => ${args.booleans.has("paused")}) as s`;
  } catch (error) {
    if ((error as { code?: string }).code === "22007") {
      throw new CliError(
        `--every ${every} is not an interval; write e.g. '1 second', '30 seconds', '2 hours'`,
      );
    }
    refused(error);
  }
  if (args.booleans.has("json")) {
    result(JSON.stringify(row));
  } else {
    result(
      `${row.schedule}: ${row.flow}, ${timing(row)}; ` +
        (row.paused ? "paused" : `next tick ${row.next_tick_at}`),
    );
  }
  return 0;
}

async function change(sql: Sql, args: ParsedArgs, action: "pause" | "resume"): Promise<number> {
  const [name] = args.positionals;
  let row: ScheduleRow;
  try {
    [{ s: row }] = action === "pause"
      ? await sql<{ s: ScheduleRow }[]>`select pgflow.pause_schedule(${name}) as s`
      : await sql<{ s: ScheduleRow }[]>`select pgflow.resume_schedule(${name}) as s`;
  } catch (error) {
    if ((error as { code?: string }).code === "P0002") return missing(name, args);
    refused(error);
  }
  if (args.booleans.has("json")) result(JSON.stringify(row));
  else result(`${name}: ${row.paused ? "paused" : `next tick ${row.next_tick_at}`}`);
  return 0;
}

async function remove(sql: Sql, args: ParsedArgs): Promise<number> {
  const [name] = args.positionals;
  const [{ deleted }] = await sql<{ deleted: boolean }[]>`
    select pgflow.delete_schedule(${name}) as deleted`;
  if (!deleted) return missing(name, args);
  if (args.booleans.has("json")) result(JSON.stringify({ schedule: name, deleted: true }));
  else result(`${name}: deleted (its runs stay)`);
  return 0;
}

function missing(name: string, args: ParsedArgs): number {
  if (args.booleans.has("json")) {
    result(JSON.stringify({ schedule: name, error: "no such schedule" }));
  }
  console.error(
    `pgflow: there is no schedule ${name}; \`${command("schedules list")}\` lists them`,
  );
  return 3;
}
