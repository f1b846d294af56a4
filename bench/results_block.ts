/**
 * The sections of `bench/results.md` that one script writes whole: the text between
 * `<!-- NAME:start -->` and `<!-- NAME:end -->` is replaced by what the script printed, headed by
 * the command that made it and when. The rest of the file is left alone.
 *
 * @module
 */

/**
 * Replaces block `name` of `bench/results.md` with `lines`, headed by `command`.
 *
 * @example
 * ```ts
 * import { writeResultsBlock } from "./results_block.ts";
 *
 * writeResultsBlock("growth", "deno run -A bench/growth.ts --write", ["| a | b |"]);
 * ```
 */
export function writeResultsBlock(name: string, command: string, lines: readonly string[]): void {
  const path = new URL("./results.md", import.meta.url);
  const text = Deno.readTextFileSync(path);
  const begin = `<!-- ${name}:start -->`;
  const end = `<!-- ${name}:end -->`;
  const from = text.indexOf(begin);
  const to = text.indexOf(end);
  if (from < 0 || to < from) throw new Error(`bench/results.md has no ${begin} … ${end} block`);
  const stamp = `Written by \`${command}\` on ${new Date().toISOString()}.`;
  Deno.writeTextFileSync(
    path,
    `${text.slice(0, from + begin.length)}\n\n${stamp}\n\n${lines.join("\n")}\n\n${text.slice(to)}`,
  );
}
