/**
 * What `pgflow compile` and `pgflow plan` share: their command line (one module, `--flow`,
 * `--database-url`, `--json`), loading the module, and a database whose engine schema is this
 * CLI's version.
 *
 * @module
 */
import { readSchemaVersion, schemaVersionProblem } from "../../operations/schema_version.ts";
import type { Sql } from "../../platform/types.ts";
import { ENGINE_VERSION } from "../../util/version.ts";
import { parseArgs } from "../args.ts";
import { databaseUrl, openDatabase } from "../connect.ts";
import { CliError, UsageError } from "../output.ts";
import { type LoadedFlow, loadFlows } from "./load.ts";

/** A parsed `compile` / `plan` command line, its flows loaded. */
export interface DeployCommand {
  /** `--help` was given: print the help, nothing else was done. */
  readonly help: boolean;
  /** The module argument as typed. */
  readonly module: string;
  /** Its flows (after `--flow`). */
  readonly flows: readonly LoadedFlow[];
  /** `--json` was given. */
  readonly json: boolean;
  /** The database URL (with its password: print it only through `redact`). */
  readonly url: string;
}

/**
 * Parses the command line of `name` (`pgflow plan`) and loads the module's flows. Usage errors
 * come first, so a wrong command line never imports anything.
 *
 * @example
 * ```ts
 * import { deployCommand } from "./session.ts";
 *
 * // const cmd = await deployCommand(["./flows.ts", "--json"], "pgflow plan");
 * ```
 */
export async function deployCommand(argv: readonly string[], name: string): Promise<DeployCommand> {
  const args = parseArgs(
    argv,
    { "database-url": "string", "flow": "list", "json": "boolean" },
    name,
    1,
  );
  if (args.help) return { help: true, module: "", flows: [], json: false, url: "" };
  const [module] = args.positionals;
  if (module === undefined) {
    throw new UsageError(
      `${name} needs the module that exports your flows, e.g. \`${name} ./supabase/functions/_flows/mod.ts\`; run "${name} --help"`,
    );
  }
  const { url } = databaseUrl(args.strings["database-url"], name);
  const flows = await loadFlows(module, args.lists["flow"] ?? []);
  return { help: false, module, flows, json: args.booleans.has("json"), url };
}

/**
 * Opens the database and checks its engine schema is this CLI's version; the caller ends the pool.
 *
 * @example
 * ```ts
 * import { openEngine } from "./session.ts";
 *
 * // const sql = await openEngine(url); try { … } finally { await sql.end(); }
 * ```
 */
export async function openEngine(url: string): Promise<Sql> {
  const sql = await openDatabase(url);
  try {
    const problem = schemaVersionProblem(await readSchemaVersion(sql), ENGINE_VERSION);
    if (problem !== undefined) throw new CliError(problem);
    return sql;
  } catch (error) {
    await sql.end({ timeout: 5 });
    throw error;
  }
}

/**
 * The names of the queues PGMQ lists now, lower-cased as pgflow compares them.
 *
 * @example
 * ```ts
 * import { listQueueNames } from "./session.ts";
 *
 * // const before = await listQueueNames(sql);
 * ```
 */
export async function listQueueNames(sql: Sql): Promise<string[]> {
  const rows = await sql<{ name: string }[]>`
    select queue_name::text as name from pgmq.list_queues()`;
  return rows.map((r) => r.name.toLowerCase());
}
