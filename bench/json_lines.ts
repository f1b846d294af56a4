/**
 * Reads a child process's output one JSON line at a time (the benchmarks' worker processes print
 * one line per event).
 *
 * @example
 * ```ts
 * import { jsonLines } from "./json_lines.ts";
 *
 * const child = new Deno.Command("echo", { args: ['{"event":"ready"}'], stdout: "piped" }).spawn();
 * const next = jsonLines<{ event: string }>(child.stdout, "echo");
 * console.log((await next()).event); // ready
 * ```
 *
 * @module
 */

/** Returns a function that resolves with the next line parsed; it rejects once `stdout` ends. */
export function jsonLines<T>(stdout: ReadableStream<Uint8Array>, what: string): () => Promise<T> {
  const chunks = stdout.pipeThrough(new TextDecoderStream())[Symbol.asyncIterator]();
  let buffer = "";
  return async () => {
    while (!buffer.includes("\n")) {
      const { value, done } = await chunks.next();
      if (done) throw new Error(`${what} exited early`);
      buffer += value;
    }
    const end = buffer.indexOf("\n");
    const line = buffer.slice(0, end);
    buffer = buffer.slice(end + 1);
    return JSON.parse(line) as T;
  };
}
