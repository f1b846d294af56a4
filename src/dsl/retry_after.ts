/**
 * "Retry this task later": an error a handler throws when the outside world said "not now" (an
 * HTTP 429 or 503 with `Retry-After`), so the task is retried after that delay instead of the
 * flow's backoff, without the attempt counting toward `maxAttempts`.
 *
 * @module
 */

/**
 * The longest delay a handler may ask for: one day, as SQL's `pgflow._max_retry_delay()`.
 *
 * @example
 * ```ts
 * import { MAX_RETRY_AFTER_MS, RetryAfter } from "@pgflow/shared";
 *
 * const asked = 3 * 86_400_000; // a server asking for three days
 * const later = new RetryAfter({ afterMs: Math.min(asked, MAX_RETRY_AFTER_MS) });
 * ```
 */
export const MAX_RETRY_AFTER_MS = 86_400_000;

/**
 * How many times one task may be deferred before each deferral counts as a failed attempt, as
 * SQL's `pgflow._max_uncounted('deferred')`. Internal: not exported by the package.
 */
export const MAX_DEFERRALS = 100;

/**
 * What {@link RetryAfter} is built from.
 *
 * @example
 * ```ts
 * import { RetryAfter, type RetryAfterOptions } from "@pgflow/shared";
 *
 * const options: RetryAfterOptions = { afterMs: 10_000, reason: "quota" };
 * const later = new RetryAfter(options);
 * ```
 */
export interface RetryAfterOptions {
  /** Milliseconds to wait before the retry: 0 to {@link MAX_RETRY_AFTER_MS}, rounded up to whole seconds. */
  readonly afterMs: number;
  /** Why, for the attempt's history (never put response bodies or secrets here). */
  readonly reason?: string;
}

/**
 * What {@link RetryAfter.fromResponse} reads of a response: its status and its `Retry-After`
 * header (a `Response` is one).
 *
 * @example
 * ```ts
 * import { RetryAfter, type RetryAfterResponse } from "@pgflow/shared";
 *
 * const res: RetryAfterResponse = { status: 429, headers: new Headers({ "retry-after": "5" }) };
 * console.log(RetryAfter.fromResponse(res).delaySeconds); // 5
 * ```
 */
export interface RetryAfterResponse {
  /** The HTTP status, named in the attempt's history. */
  readonly status: number;
  /** The response's headers; only `Retry-After` is read. */
  readonly headers: { get(name: string): string | null };
}

/**
 * Thrown by a handler to have its task retried after `afterMs`, not after the flow's backoff. The
 * attempt is kept in the task's history as `deferred` and does not count toward `maxAttempts`: a
 * rate-limited call cannot exhaust a task. A task may be deferred 100 times; past that each
 * deferral counts as a failed attempt (retried after the delay asked while attempts remain), so a
 * handler that always says "later" ends. Delays are whole seconds (PGMQ's visibility is), rounded
 * up; more than a day is refused here.
 *
 * @example
 * ```ts
 * import { Flow, RetryAfter } from "@pgflow/shared";
 *
 * new Flow<{ channel: string; text: string }>({ slug: "notify" })
 *   .step({ slug: "post" }, async (input, ctx) => {
 *     const res = await fetch("https://slack.com/api/chat.postMessage", {
 *       method: "POST",
 *       body: JSON.stringify(input),
 *       signal: ctx.signal,
 *     });
 *     if (res.status === 429) {
 *       await res.body?.cancel();
 *       throw RetryAfter.fromResponse(res, 30_000); // its Retry-After, or 30 s without one
 *     }
 *     return { ok: res.ok };
 *   });
 *
 * const later = new RetryAfter({ afterMs: 1_500, reason: "quota resets soon" });
 * console.log(later.delaySeconds); // 2: thrown, the task is retried after 2 s
 * ```
 */
export class RetryAfter extends Error {
  /** The delay asked for, in milliseconds. */
  readonly afterMs: number;
  /** The delay applied: whole seconds, rounded up. */
  readonly delaySeconds: number;

  /** Throws a `RangeError` naming the value when `afterMs` is not a number from 0 to a day. */
  constructor(options: RetryAfterOptions) {
    const afterMs = options?.afterMs;
    if (typeof afterMs !== "number" || !Number.isFinite(afterMs) || afterMs < 0) {
      throw new RangeError(
        `RetryAfter: afterMs must be a finite number of milliseconds >= 0, not ${
          describe(afterMs)
        }; pass e.g. { afterMs: 30_000 }`,
      );
    }
    if (afterMs > MAX_RETRY_AFTER_MS) {
      throw new RangeError(
        `RetryAfter: afterMs ${afterMs} is more than a day (${MAX_RETRY_AFTER_MS} ms), the most a ` +
          "task may be deferred; fail the task instead, or start a new run when the time comes",
      );
    }
    const delaySeconds = Math.ceil(afterMs / 1000);
    super(`retry after ${delaySeconds} s${options.reason ? `: ${options.reason}` : ""}`);
    this.name = "RetryAfter";
    this.afterMs = afterMs;
    this.delaySeconds = delaySeconds;
  }

  /**
   * From an HTTP `Retry-After` value: delay-seconds (`"120"`) or an HTTP date (`"Wed, 21 Oct 2026
   * 07:28:00 GMT"`, a date already past meaning now). Without a value, `fallbackMs` is used, and
   * with neither it throws; so does a value that is neither form, or more than a day away.
   *
   * @example
   * ```ts
   * import { RetryAfter } from "@pgflow/shared";
   *
   * console.log(RetryAfter.fromHeader("120").delaySeconds); // 120
   * ```
   */
  static fromHeader(
    value: string | null | undefined,
    fallbackMs?: number,
    now: number = Date.now(),
  ): RetryAfter {
    const text = value?.trim() ?? "";
    if (text === "") {
      if (fallbackMs !== undefined) return new RetryAfter({ afterMs: fallbackMs });
      throw new RangeError(
        "RetryAfter.fromHeader: no Retry-After value; pass a fallbackMs for responses without one",
      );
    }
    if (/^[0-9]+$/.test(text)) {
      return new RetryAfter({ afterMs: Number(text) * 1000, reason: `Retry-After: ${text}` });
    }
    const at = /[A-Za-z]/.test(text) ? Date.parse(text) : NaN;
    if (!Number.isFinite(at)) {
      throw new RangeError(
        `RetryAfter.fromHeader: ${
          JSON.stringify(text.slice(0, 64))
        } is neither delay-seconds nor an HTTP date (e.g. "120" or "Wed, 21 Oct 2026 07:28:00 GMT")`,
      );
    }
    return new RetryAfter({ afterMs: Math.max(0, at - now), reason: `Retry-After: ${text}` });
  }

  /**
   * From a response's `Retry-After` header (see {@link fromHeader}); the status is named in the
   * attempt's history. Only the header is read: never the body, which is neither logged nor kept.
   *
   * @example
   * ```ts
   * import { RetryAfter } from "@pgflow/shared";
   *
   * const res = new Response(null, { status: 429, headers: { "retry-after": "3" } });
   * console.log(RetryAfter.fromResponse(res).message); // "retry after 3 s: HTTP 429, Retry-After: 3"
   * ```
   */
  static fromResponse(response: RetryAfterResponse, fallbackMs?: number): RetryAfter {
    const header = response.headers.get("retry-after");
    const parsed = RetryAfter.fromHeader(header, fallbackMs);
    const said = header === null ? "no Retry-After" : `Retry-After: ${header.trim().slice(0, 64)}`;
    return new RetryAfter({ afterMs: parsed.afterMs, reason: `HTTP ${response.status}, ${said}` });
  }
}

function describe(value: unknown): string {
  return typeof value === "number" ? String(value) : `${typeof value} ${String(value)}`;
}
