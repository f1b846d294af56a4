import assert from "node:assert/strict";
import { MAX_RETRY_AFTER_MS, RetryAfter } from "../../mod.ts";

Deno.test("RetryAfter rounds a delay up to whole seconds", () => {
  assert.equal(new RetryAfter({ afterMs: 0 }).delaySeconds, 0);
  assert.equal(new RetryAfter({ afterMs: 1 }).delaySeconds, 1);
  assert.equal(new RetryAfter({ afterMs: 1_500 }).delaySeconds, 2);
  assert.equal(new RetryAfter({ afterMs: 30_000 }).delaySeconds, 30);
  assert.equal(new RetryAfter({ afterMs: MAX_RETRY_AFTER_MS }).delaySeconds, 86_400);
  const later = new RetryAfter({ afterMs: 2_000, reason: "quota" });
  assert.equal(later.message, "retry after 2 s: quota");
  assert.equal(later.name, "RetryAfter");
  assert.ok(later instanceof Error);
});

Deno.test("RetryAfter refuses a negative, NaN, infinite, non-number or absurd delay, naming it", () => {
  for (
    const afterMs of [-1, NaN, Infinity, "30" as unknown as number, undefined as unknown as number]
  ) {
    assert.throws(
      () => new RetryAfter({ afterMs }),
      (e: Error) =>
        e instanceof RangeError && e.message.includes(String(afterMs)) &&
        e.message.includes("{ afterMs: 30_000 }"),
      `afterMs ${String(afterMs)}`,
    );
  }
  assert.throws(
    () => new RetryAfter({ afterMs: MAX_RETRY_AFTER_MS + 1 }),
    /afterMs 86400001 is more than a day \(86400000 ms\)/,
  );
});

Deno.test("RetryAfter.fromHeader reads delay-seconds and HTTP dates", () => {
  assert.equal(RetryAfter.fromHeader("120").delaySeconds, 120);
  assert.equal(RetryAfter.fromHeader(" 0 ").delaySeconds, 0);
  const now = Date.parse("2026-10-21T07:27:00.000Z");
  const dated = RetryAfter.fromHeader("Wed, 21 Oct 2026 07:28:00 GMT", undefined, now);
  assert.equal(dated.afterMs, 60_000);
  assert.equal(dated.delaySeconds, 60);
  // A date already past means now.
  assert.equal(RetryAfter.fromHeader("Wed, 21 Oct 2026 07:00:00 GMT", undefined, now).afterMs, 0);
  // Without a value: the fallback, or an error saying to pass one.
  assert.equal(RetryAfter.fromHeader(null, 5_000).delaySeconds, 5);
  assert.throws(() => RetryAfter.fromHeader(null), /no Retry-After value; pass a fallbackMs/);
  for (const bad of ["-5", "1.5", "soon", "12abc"]) {
    assert.throws(
      () => RetryAfter.fromHeader(bad),
      (e: Error) => e instanceof RangeError && e.message.includes(JSON.stringify(bad)),
      bad,
    );
  }
  // A server asking for more than a day is refused, not silently shortened.
  assert.throws(() => RetryAfter.fromHeader("90000"), /more than a day/);
});

Deno.test("RetryAfter.fromResponse reads the header only, and names the status", async () => {
  const res = new Response("secret body text", { status: 429, headers: { "Retry-After": "3" } });
  const later = RetryAfter.fromResponse(res);
  assert.equal(later.delaySeconds, 3);
  assert.equal(later.message, "retry after 3 s: HTTP 429, Retry-After: 3");
  assert.ok(!later.message.includes("secret"));
  assert.equal(res.bodyUsed, false);
  await res.body?.cancel();
  const without = RetryAfter.fromResponse(new Response(null, { status: 503 }), 10_000);
  assert.equal(without.message, "retry after 10 s: HTTP 503, no Retry-After");
});
