/**
 * A command made of subcommands on one database (`pgflow aliases list|activate`, `pgflow queues
 * list|drop`): the help, an unknown subcommand, the flags, the database opened once the command
 * line is right, and a failure that is not the command's own explained.
 *
 * @module
 */
import type { Sql } from "../platform/types.ts";
import { type FlagSpec, parseArgs, type ParsedArgs } from "./args.ts";
import { databaseUrl, openDatabase } from "./connect.ts";
import { describeError } from "./migration_runner.ts";
import { CliError, command, result, UsageError } from "./output.ts";

/** One subcommand: its flags (besides `--database-url` and `--json`), its arguments, its work. */
export interface Subcommand {
  /** Flags besides `--database-url` and `--json`. */
  readonly flags?: FlagSpec;
  /** How many plain arguments it takes, exactly. */
  readonly arguments: number;
  /** The usage error for the wrong number of arguments. */
  readonly usage?: string;
  /** Runs it on the open database; returns the exit code. */
  readonly run: (sql: Sql, args: ParsedArgs) => Promise<number>;
}

/**
 * Runs `pgflow <group> <subcommand> …`; returns the exit code. No subcommand prints `help` (exit
 * 2), `--help` prints it (exit 0).
 *
 * @example
 * ```ts
 * import { runSubcommand } from "./subcommands.ts";
 *
 * // return await runSubcommand("queues", QUEUES_HELP, { list: { arguments: 0, run: list } }, argv);
 * ```
 */
export async function runSubcommand(
  group: string,
  help: string,
  subcommands: Readonly<Record<string, Subcommand>>,
  argv: readonly string[],
): Promise<number> {
  const [sub, ...rest] = argv;
  if (sub === undefined || sub === "--help" || sub === "-h" || sub === "help") {
    result(help);
    return sub === undefined ? 2 : 0;
  }
  const names = Object.keys(subcommands);
  if (!Object.hasOwn(subcommands, sub)) {
    throw new UsageError(
      `unknown subcommand ${JSON.stringify(sub)} of pgflow ${group}; use ` +
        `${names.slice(0, -1).join(", ")} or ${names.at(-1)} (run "pgflow ${group} --help")`,
    );
  }
  const spec = subcommands[sub];
  const name = `pgflow ${group} ${sub}`;
  const args = parseArgs(
    rest,
    { "database-url": "string", "json": "boolean", ...spec.flags },
    name,
    spec.arguments,
  );
  if (args.help) {
    result(help);
    return 0;
  }
  if (args.positionals.length !== spec.arguments) {
    throw new UsageError(spec.usage ?? `${name} takes ${spec.arguments} argument(s)`);
  }
  const { url } = databaseUrl(args.strings["database-url"], name);
  const sql = await openDatabase(url);
  try {
    return await spec.run(sql, args);
  } catch (error) {
    if (error instanceof CliError) throw error;
    throw new CliError(
      `${name} failed: ${describeError(error)}. Is the engine installed and up to date ` +
        `(\`${command("status")}\`)?`,
    );
  } finally {
    await sql.end({ timeout: 5 });
  }
}
