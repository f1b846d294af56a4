/**
 * Message ids are `bigint` in SQL. In JavaScript they stay exact decimal strings end to end: a
 * `number` would silently round ids past 2^53 and claim the wrong task.
 */

const DECIMAL = /^(0|[1-9][0-9]{0,18})$/;
const MAX_BIGINT = 9223372036854775807n;

/**
 * Returns a message id as an exact decimal string, or throws when the value is not one (a number
 * is accepted only while it is a safe integer).
 *
 * @example
 * ```ts
 * import { toMessageId } from "./message_id.ts";
 *
 * toMessageId("9007199254740993"); // "9007199254740993"
 * toMessageId(42); // "42"
 * ```
 */
export function toMessageId(value: unknown): string {
  if (typeof value === "string" && DECIMAL.test(value) && BigInt(value) <= MAX_BIGINT) return value;
  if (typeof value === "bigint" && value >= 0n && value <= MAX_BIGINT) return value.toString();
  if (typeof value === "number" && Number.isSafeInteger(value) && value >= 0) return String(value);
  throw new TypeError(
    `message id ${String(value)} (${typeof value}) is not an exact non-negative bigint; ` +
      `pass ids as decimal strings`,
  );
}
