/**
 * The worker's bound on the JSON a task carries in and out (`maxPayloadBytes`): a task input, a
 * run input read through `ctx.flowInput`, or a handler's output larger than the bound fails the
 * task with a {@link PayloadTooLarge} error naming the size, the bound and the fix, before the
 * worker parses or sends it. Parsed JSON takes several times its text in memory, so without a
 * bound one large payload ends a 256 MB Edge isolate, and every retry of its task ends the next
 * one. Sizes are bytes of the JSON text as Postgres writes it (`octet_length(value::text)`).
 *
 * @module
 */

/**
 * The default bound, 10 MiB: the largest payload whose worst case (small records, made by one
 * step and parsed by the next in the same worker, about 18 MiB of heap per MB) stays within a
 * 256 MB isolate's heap. `docs/reliability.md` (Large payloads) gives the measured figures.
 */
export const DEFAULT_MAX_PAYLOAD_BYTES = 10 * 2 ** 20;

/**
 * The largest bound: `jsonb` stores no value larger than 268,435,455 bytes (255 MiB), so no task
 * could ever complete with more.
 */
export const JSONB_MAX_BYTES = 268_435_455;

/**
 * A payload over the worker's `maxPayloadBytes`. Its message gives the size, the bound and what
 * to do, never the payload.
 *
 * @example
 * ```ts
 * import { PayloadTooLarge } from "@pgflow/shared";
 *
 * const error = new PayloadTooLarge("output of step shop.export", 40_000_000, 16_777_216);
 * console.log(error.message); // "output of step shop.export is 40,000,000 bytes of JSON, over …"
 * ```
 */
export class PayloadTooLarge extends Error {
  /** What was too large, e.g. `input of task shop.export[0]`. */
  readonly what: string;
  /** Its size in bytes of JSON text. */
  readonly bytes: number;
  /** The bound it exceeded. */
  readonly limit: number;

  /**
   * The error for `what`, `bytes` long, over `limit`.
   *
   * @param what what was too large, e.g. `output of task shop.export[0]`
   * @param bytes its size in bytes of JSON text
   * @param limit the bound it exceeded
   */
  constructor(what: string, bytes: number, limit: number) {
    super(
      `${what} is ${count(bytes)} bytes of JSON, over the worker's maxPayloadBytes ` +
        `(${count(limit)}): keep large data in Storage or a table and pass a reference ` +
        `(a path or an id) between steps, or raise maxPayloadBytes if the worker has the memory ` +
        `(about 10 times the payload for parsed records; see docs/reliability.md)`,
    );
    this.name = "PayloadTooLarge";
    this.what = what;
    this.bytes = bytes;
    this.limit = limit;
  }
}

/**
 * Throws {@link PayloadTooLarge} when `text` (JSON about to be sent) is more than `limit` bytes
 * in UTF-8; returns it otherwise. Counts bytes only when the length alone cannot decide (a UTF-16
 * unit is 1 to 3 bytes, a surrogate pair 4), so a payload well under or over costs nothing.
 *
 * @example
 * ```ts
 * import { checkPayloadText } from "./payload_limit.ts";
 *
 * const sent = checkPayloadText('{"ok":true}', 1024, "output of step a.b"); // '{"ok":true}'
 * ```
 */
export function checkPayloadText(text: string, limit: number, what: string): string {
  if (text.length * 3 <= limit) return text;
  const bytes = text.length > limit ? text.length : utf8Length(text);
  if (bytes > limit) throw new PayloadTooLarge(what, bytes, limit);
  return text;
}

/**
 * Bytes of `text` in UTF-8, without encoding it. A surrogate is counted as half of a pair (2
 * bytes): `JSON.stringify` writes a lone one as a `\u` escape, so JSON text holds only pairs.
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const unit = text.charCodeAt(i);
    if (unit < 0x80) continue;
    bytes += unit < 0x800 || (unit >= 0xd800 && unit <= 0xdfff) ? 1 : 2;
  }
  return bytes;
}

function count(n: number): string {
  return n.toLocaleString("en-US");
}
