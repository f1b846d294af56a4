/**
 * How the CLI talks: results on stdout, progress and errors on stderr, and errors that carry
 * their exit code (1: a check failed or the target is not right; 2: the command line is wrong).
 *
 * @module
 */
import { cliCommand } from "../operations/schema_version.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { localInvocation } from "./packaged.ts";

/**
 * A failure the CLI reports as one message (what was wrong, and what to do) and an exit code.
 *
 * @example
 * ```ts
 * import { CliError } from "./output.ts";
 *
 * throw new CliError("supabase/config.toml not found: run `supabase init` first");
 * ```
 */
export class CliError extends Error {
  /** The process exit code: 1 (failed) or 2 (usage). */
  readonly exitCode: 1 | 2;

  /**
   * @param message what was wrong and what to do
   * @param exitCode 1 (default) when the check or the target failed, 2 for a usage error
   */
  constructor(message: string, exitCode: 1 | 2 = 1) {
    super(message);
    this.name = "CliError";
    this.exitCode = exitCode;
  }
}

/**
 * A wrong command line: an unknown command or flag, a missing or malformed value. Exit code 2.
 *
 * @example
 * ```ts
 * import { UsageError } from "./output.ts";
 *
 * throw new UsageError('unknown flag --databse-url; run "pgflow migrate --help"');
 * ```
 */
export class UsageError extends CliError {
  /** @param message what was wrong and what to type instead */
  constructor(message: string) {
    super(message, 2);
    this.name = "UsageError";
  }
}

/**
 * Writes a progress line to stderr (`pgflow: …`), so stdout carries only results.
 *
 * @example
 * ```ts
 * import { progress } from "./output.ts";
 *
 * progress("applying 20261205001154_pgflow_base (1/1)");
 * ```
 */
export function progress(message: string): void {
  console.error(`pgflow: ${message}`);
}

/**
 * A result line on stdout.
 *
 * @example
 * ```ts
 * import { result } from "./output.ts";
 *
 * result("postgres://postgres@127.0.0.1:54330/postgres");
 * ```
 */
export function result(line: string): void {
  console.log(line);
}

/**
 * Seconds since `start` (a `performance.now()` reading), for "done in 1.2 s".
 *
 * @example
 * ```ts
 * import { elapsed } from "./output.ts";
 *
 * const t = performance.now();
 * console.log(`done in ${elapsed(t)}`); // "done in 0.0 s"
 * ```
 */
export function elapsed(start: number): string {
  return `${((performance.now() - start) / 1000).toFixed(1)} s`;
}

/**
 * How to type a CLI command here: `deno task pgflow …` in a checkout of this repository, else the
 * module's `deno run -A jsr:@pgflow/shared@<version>/cli …` (published, or linked to a checkout by
 * the folder's deno.json, as `pgflow init` writes it); never a path of this machine.
 *
 * @example
 * ```ts
 * import { command } from "./output.ts";
 *
 * console.log(`start it with \`${command("db start")}\``);
 * ```
 */
export function command(args: string): string {
  const local = localInvocation();
  return local !== undefined ? `${local} ${args}` : cliCommand(args, ENGINE_VERSION);
}
