/**
 * A tiny command-line parser: `--name value`, `--name=value`, boolean `--name`, and `--help`.
 * Anything else is a {@link UsageError} that names the argument and the help to read.
 *
 * @module
 */
import { UsageError } from "./output.ts";

/**
 * Each flag a command takes (without the leading `--`) and whether it takes a value: "string"
 * once, "list" as many times as wanted, "boolean" none.
 */
export type FlagSpec = Readonly<Record<string, "string" | "list" | "boolean">>;

/** What {@link parseArgs} found. */
export interface ParsedArgs {
  /** `--help` or `-h` was given. */
  readonly help: boolean;
  /** Values of the string flags given. */
  readonly strings: Readonly<Record<string, string>>;
  /** The values of each "list" flag given, in order. */
  readonly lists: Readonly<Record<string, readonly string[]>>;
  /** The boolean flags given. */
  readonly booleans: ReadonlySet<string>;
  /** Arguments that are not flags, in order. */
  readonly positionals: readonly string[];
}

/**
 * Parses `argv` against `spec`; `command` names the command in errors ("pgflow migrate").
 * `maxPositionals` (default 0) is how many plain arguments are allowed.
 *
 * @example
 * ```ts
 * import { parseArgs } from "./args.ts";
 *
 * const args = parseArgs(["--database-url", "postgres://x"], { "database-url": "string" }, "pgflow migrate");
 * console.log(args.strings["database-url"]); // "postgres://x"
 * ```
 */
export function parseArgs(
  argv: readonly string[],
  spec: FlagSpec,
  command: string,
  maxPositionals = 0,
): ParsedArgs {
  const strings: Record<string, string> = {};
  const lists: Record<string, string[]> = {};
  const booleans = new Set<string>();
  const positionals: string[] = [];
  let help = false;
  const seeHelp = `run "${command} --help"`;
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--help" || arg === "-h") {
      help = true;
      continue;
    }
    if (!arg.startsWith("-") || arg === "-") {
      if (positionals.length >= maxPositionals) {
        throw new UsageError(
          `${command} takes ${
            maxPositionals === 0 ? "no arguments" : `at most ${maxPositionals}`
          }, got ${JSON.stringify(arg)}; ${seeHelp}`,
        );
      }
      positionals.push(arg);
      continue;
    }
    const eq = arg.indexOf("=");
    const flag = eq < 0 ? arg : arg.slice(0, eq);
    const name = flag.slice(2);
    const kind = flag.startsWith("--") && Object.hasOwn(spec, name) ? spec[name] : undefined;
    if (kind === undefined) {
      const known = Object.keys(spec).map((f) => `--${f}`).join(", ") || "none";
      throw new UsageError(
        `unknown flag ${JSON.stringify(flag)} for ${command} (its flags: ${known}); ${seeHelp}`,
      );
    }
    if (kind === "boolean") {
      if (eq >= 0) throw new UsageError(`--${name} takes no value; ${seeHelp}`);
      booleans.add(name);
      continue;
    }
    const value = eq >= 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined || value === "" || (eq < 0 && value.startsWith("--"))) {
      throw new UsageError(`--${name} needs a value; ${seeHelp}`);
    }
    if (kind === "list") {
      (lists[name] ??= []).push(value);
      continue;
    }
    if (name in strings) throw new UsageError(`--${name} is given twice; ${seeHelp}`);
    strings[name] = value;
  }
  return { help, strings, lists, booleans, positionals };
}
