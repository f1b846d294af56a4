/**
 * A database error as one line for a person: Postgres's message, and its HINT when it has one.
 * The engine's SQL puts what to do in the HINT (end the deploy fence, use another slug), and a
 * message alone drops exactly that part.
 *
 * @example
 * ```ts
 * import { pgMessage } from "./pg_message.ts";
 *
 * pgMessage(Object.assign(new Error("queue q is busy"), { hint: "wait for it" }));
 * // "queue q is busy (hint: wait for it)"
 * ```
 */
export function pgMessage(error: unknown): string {
  const e = error as { message?: unknown; hint?: unknown } | null;
  const message = typeof e?.message === "string" ? e.message : String(error);
  return typeof e?.hint === "string" && e.hint !== "" ? `${message} (hint: ${e.hint})` : message;
}

/**
 * The text of a database error for a log line: its message's first line, at most 200 characters.
 * For errors of the worker's own calls (Postgres and postgres.js messages), never a handler's.
 */
export function databaseErrorText(error: unknown): string {
  const text = error instanceof Error ? error.message || error.name : String(error);
  const line = text.split("\n")[0].replaceAll("\0", "\uFFFD");
  return line.length <= 200 ? line : `${line.slice(0, 190)} … [cut]`;
}
