/** The interval summary's arithmetic (its log lines are tested with real workers in operator_logs_test.ts). */
import assert from "node:assert/strict";
import { ActivityLog } from "../../src/platform/activity.ts";
import { createLogger, type LogRecord } from "../../mod.ts";

function activity() {
  const records: LogRecord[] = [];
  return {
    log: new ActivityLog(createLogger({ level: "debug", sink: (r) => records.push(r) })),
    records,
  };
}

Deno.test("the summary counts outcomes and gives nearest-rank p50 and p95; quiet intervals write nothing", () => {
  const { log, records } = activity();
  log.flush();
  assert.equal(records.length, 0, "nothing happened, nothing written");
  for (let ms = 1; ms <= 100; ms++) {
    log.task(ms % 10 === 0 ? "failed" : ms % 5 === 0 ? "retried" : "completed", ms);
  }
  log.flush();
  assert.equal(records.length, 1);
  const { completed, failed, retried, p50Ms, p95Ms } = records[0].fields;
  assert.deepEqual({ completed, failed, retried, p50Ms, p95Ms }, {
    completed: 80,
    failed: 10,
    retried: 10,
    p50Ms: 50,
    p95Ms: 95,
  });
  log.flush();
  assert.equal(records.length, 1, "the next interval starts from zero");
});

Deno.test("unclaimed messages are grouped by disposition, flow and step, with a count", () => {
  const { log, records } = activity();
  for (let i = 0; i < 5; i++) {
    log.unclaimed({
      disposition: "unsupported",
      flowSlug: "f",
      stepSlug: "s",
      messageId: String(i),
    });
  }
  log.unclaimed({ disposition: "unsupported", flowSlug: "f", stepSlug: "t", messageId: "9" });
  log.unclaimed({ disposition: "unknown", flowSlug: null, stepSlug: null, messageId: "10" });
  log.flush();
  assert.deepEqual(
    records.map((
      r,
    ) => [r.event, r.fields.flow, r.fields.step, r.fields.count, r.fields.exampleMessageId]),
    [
      ["messages not claimed (unsupported)", "f", "s", 5, "0"],
      ["messages not claimed (unsupported)", "f", "t", 1, "9"],
      ["messages not claimed (unknown)", undefined, undefined, 1, "10"],
    ],
  );
  log.flush();
  assert.equal(records.length, 3, "reported once per interval");
});

Deno.test("a long interval keeps a bounded sample of handler times", () => {
  const { log, records } = activity();
  for (let i = 0; i < 50_000; i++) log.task("completed", i < 25_000 ? 10 : 20);
  log.flush();
  assert.equal(records[0].fields.completed, 50_000);
  assert.ok([10, 20].includes(Number(records[0].fields.p50Ms)));
  assert.equal(records[0].fields.p95Ms, 20);
});
