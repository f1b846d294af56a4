/**
 * The default log sink's budget (src/platform/log_budget.ts), on a fake clock: a storm of failing
 * tasks stays under 100 lines in every 10 s, sliding or not, and nothing is dropped (every line is
 * written or counted in an aggregate line); rare lines still come through as they are.
 */
import assert from "node:assert/strict";
import type { LogRecord } from "../../mod.ts";
import { LogBudget } from "../../src/platform/log_budget.ts";

Deno.test("log budget: a storm stays under 100 lines per 10 s, and every line is counted", () => {
  let now = 1_000_000;
  const written: { at: number; record: LogRecord }[] = [];
  const timers: { at: number; run: () => void }[] = [];
  const budget = new LogBudget({
    write: (record) => written.push({ at: now, record }),
    now: () => now,
    schedule: (run, ms) => {
      const timer = { at: now + ms, run };
      timers.push(timer);
      return () => {
        if (timers.includes(timer)) timers.splice(timers.indexOf(timer), 1);
      };
    },
  });
  let offered = 0;
  // 60 s: 50 failed tasks a second over three steps and two error kinds, a lifecycle line now
  // and then, and one summary line a second.
  for (let ms = 0; ms < 60_000; ms += 20) {
    now += 20;
    for (const timer of timers.filter((t) => t.at <= now)) {
      timers.splice(timers.indexOf(timer), 1);
      timer.run();
    }
    const step = ["a", "b", "c"][(ms / 20) % 3];
    budget.offer({
      level: "warn",
      event: "task failed",
      fields: { flow: "f", step, errorKind: ms % 40 === 0 ? "Error" : "TypeError", runId: `${ms}` },
    });
    offered++;
    if (ms % 1_000 === 0) {
      budget.offer({ level: "info", event: "worker summary", fields: { completed: 1 } });
      offered++;
    }
    if (ms % 15_000 === 0) {
      budget.offer({ level: "info", event: "worker started", fields: {} });
      offered++;
    }
  }
  budget.flush();
  const counted = written.reduce((n, w) => n + Number(w.record.fields.aggregated ?? 1), 0);
  assert.equal(counted, offered, "every line is written or counted");
  let most = 0;
  for (let i = 0, j = 0; i < written.length; i++) {
    while (written[i].at - written[j].at >= 10_000) j++;
    most = Math.max(most, i - j + 1);
  }
  assert.ok(most < 100, `${most} lines in 10 s`);
  // Each lifecycle line is written as it came.
  const started = written.filter((w) => w.record.event === "worker started");
  assert.equal(started.length, 4);
  assert.ok(started.every((w) => w.record.fields.aggregated === undefined));
  // The aggregates keep the kinds apart: step and error kind.
  const kinds = new Set(
    written.filter((w) => w.record.fields.aggregated !== undefined)
      .map((w) => `${w.record.fields.step}/${w.record.fields.errorKind}`),
  );
  assert.ok(kinds.size >= 4, [...kinds].join(", "));
});
