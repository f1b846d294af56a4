/**
 * A run's input on the command line: `--input JSON` or `--input-file PATH` (a file holding one
 * JSON value). A bad one is refused without quoting it: an input may hold personal data, and a
 * command line's errors end up in logs.
 *
 * @module
 */
import { parseJson } from "../../util/json_parse.ts";
import type { ParsedArgs } from "../args.ts";
import { UsageError } from "../output.ts";

/** The flags that give an input. */
export const INPUT_FLAGS = { "input": "string", "input-file": "string" } as const;

/**
 * The input `--input` or `--input-file` gives (never both), `undefined` when neither is given.
 *
 * @example
 * ```ts
 * import { readInput } from "./input.ts";
 *
 * // const input = await readInput(args, "pgflow runs start"); // { orderId: 7 }
 * ```
 */
export async function readInput(args: ParsedArgs, command: string): Promise<unknown> {
  const inline = args.strings["input"];
  const file = args.strings["input-file"];
  if (inline !== undefined && file !== undefined) {
    throw new UsageError(`${command} takes --input or --input-file, not both`);
  }
  if (file !== undefined) {
    let text: string;
    try {
      text = await Deno.readTextFile(file);
    } catch (error) {
      throw new UsageError(`--input-file ${file} cannot be read: ${(error as Error).message}`);
    }
    return parse(text, `--input-file ${file} does not hold one JSON value`, "");
  }
  if (inline !== undefined) {
    return parse(
      inline,
      "--input is not one JSON value",
      "; quote it for the shell, e.g. --input '{\"orderId\": 7}'",
    );
  }
  return undefined;
}

function parse(text: string, problem: string, fix: string): unknown {
  try {
    // Exact: keys as written, numbers beyond 2^53 kept (JSON.parse would round them).
    return parseJson(text);
  } catch (error) {
    // Its message names a position, never the text.
    throw new UsageError(`${problem} (${(error as Error).message})${fix}`);
  }
}
