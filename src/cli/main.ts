/**
 * The `pgflow` command line: install the engine's migrations into a Supabase project, migrate a
 * database directly, run a local database, read a database's status, and watch it live.
 *
 * ```sh
 * deno run -A jsr:@pgflow/shared/cli init             # this folder's deno.json imports the module
 * deno run -A jsr:@pgflow/shared/cli install          # then: supabase db push
 * deno run -A jsr:@pgflow/shared/cli migrate --database-url postgres://…
 * deno run -A jsr:@pgflow/shared/cli db start         # a local database for your app
 * deno run -A jsr:@pgflow/shared/cli status
 * deno run -A jsr:@pgflow/shared/cli dashboard        # http://127.0.0.1:8765/
 * deno run -A jsr:@pgflow/shared/cli plan ./flows.ts  # in CI: what a deploy would do
 * ```
 *
 * @module
 */
import { maskSecrets } from "../platform/database_url.ts";
import { databaseUrlSource } from "../platform/env.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { aliases } from "./aliases.ts";
import { compile } from "./compile.ts";
import { coverage } from "./coverage.ts";
import { dashboard } from "./dashboard.ts";
import { db } from "./db.ts";
import { init } from "./init.ts";
import { install } from "./install.ts";
import { migrate } from "./migrate.ts";
import { CliError, result, UsageError } from "./output.ts";
import { plan } from "./plan.ts";
import { queues } from "./queues.ts";
import { schedules } from "./schedules.ts";
import { events } from "./events.ts";
import { runs } from "./runs.ts";
import { status } from "./status.ts";

/** The top-level help text. */
export const HELP = `pgflow ${ENGINE_VERSION}: the @pgflow/shared command line

usage: pgflow <command> [flags]      (from JSR: deno run -A jsr:@pgflow/shared/cli <command>;
                                      in this repository: deno task pgflow <command>)

commands:
  init      make this folder's deno.json import @pgflow/shared (from a checkout: linked to it)
  install   write the engine's migrations into a Supabase project (then: supabase db push;
            Supabase CLI 3: supabase db push --remote)
  migrate   apply the engine's migrations to a database directly
  db        start | stop | status | url of a local database for your app
  status    engine version, queues, workers, runs and coverage of a database
  coverage  per (flow, step) pair: work waiting, live workers, MISSING / STALE / ok / idle
  dashboard a live web page of queues, runs, failures, stuck tasks, workers and run graphs
            (read-only unless started with --allow-actions)
  runs      list | show | start | watch | cancel | retry | resume runs, one by id (or its start)
            or many by filters
  aliases   list | activate aliases: where each points, and moving one (compare-and-swap)
  queues    list | drop queues: what uses each, and dropping one nothing uses
  schedules list | create | pause | resume | delete schedules: a flow started on a cron
            expression or an interval, one run per tick
  events    send an event to waiting steps (.waitForEvent), by run or by correlation key
  compile   compile the flows a module exports into a database, without starting a worker
  plan      what deploying a module's flows would do (create, verified, refused), changing nothing

Run "pgflow <command> --help" for its flags. Exit codes: 0 ok, 1 failed or check failed, 2 usage
error (runs, aliases, queues, schedules and events add 3 nothing matched and 4 not confirmed).
Progress goes to stderr, results to stdout.`;

const COMMANDS: Record<string, (argv: readonly string[]) => Promise<number>> = {
  init,
  install,
  migrate,
  db,
  status,
  coverage,
  dashboard,
  runs,
  aliases,
  queues,
  schedules,
  events,
  compile,
  plan,
};

/**
 * Runs one command line and returns its exit code; errors are printed to stderr, never thrown.
 *
 * @example
 * ```ts
 * import { main } from "./main.ts";
 *
 * const code = await main(["--help"]); // 0
 * ```
 */
export async function main(argv: readonly string[]): Promise<number> {
  const [command, ...rest] = argv;
  try {
    if (command === undefined || command === "--help" || command === "-h" || command === "help") {
      result(HELP);
      return command === undefined ? 2 : 0;
    }
    if (command === "--version") {
      result(ENGINE_VERSION);
      return 0;
    }
    const run = Object.hasOwn(COMMANDS, command) ? COMMANDS[command] : undefined;
    if (run === undefined) {
      throw new UsageError(
        `unknown command ${JSON.stringify(command)}; the commands are ${
          Object.keys(COMMANDS).join(", ")
        } (run "pgflow --help")`,
      );
    }
    return await run(rest);
  } catch (error) {
    // Whatever failed (a flows module included) may have echoed a database URL: its password is
    // masked, in a known error's message as in an unexpected one's stack.
    if (error instanceof CliError) {
      console.error(`pgflow: error: ${maskSecrets(error.message, databaseUrlIn(rest))}`);
      return error.exitCode;
    }
    const text = (error as Error)?.stack ?? String(error);
    console.error(`pgflow: unexpected error: ${maskSecrets(text, databaseUrlIn(rest))}`);
    return 1;
  }
}

/** The `--database-url` value of a command line, else the environment's database URL. */
function databaseUrlIn(argv: readonly string[]): string | undefined {
  const at = argv.findIndex((a) => a === "--database-url" || a.startsWith("--database-url="));
  if (at >= 0) {
    return argv[at].includes("=") ? argv[at].slice(argv[at].indexOf("=") + 1) : argv[at + 1];
  }
  try {
    return databaseUrlSource(Deno.env.toObject())?.url;
  } catch {
    return undefined;
  }
}

if (import.meta.main) {
  Deno.exit(await main(Deno.args));
}
