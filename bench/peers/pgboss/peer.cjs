/**
 * pg-boss as a peer: one queue, one `work()` at batchSize PEER_CONCURRENCY with
 * `burstWhenBatchFull` (a worker that fetches one job at a time waits its polling interval
 * between fetches, 0.5 s at the least, so a drain needs batches) and `localConcurrency` 1: at most
 * PEER_CONCURRENCY jobs in hand, run at once, completed together when the batch's handler returns.
 * LISTEN/NOTIFY on (`useListenNotify`, the queue's `notify`; both off by default) so a new job
 * wakes it as the other engines' notifications do. Chains are jobs a → b → c on the same queue,
 * each batch inserting its next jobs (one `insert`) before it completes. Everything else at
 * pg-boss's defaults (maintenance, supervision, retention of completed jobs); its `error` and
 * `warning` events go to an in-process sink. Backlogs are one `insert` of every job, one commit.
 */
"use strict";
const { paced, producer, serve, settings, stepsOf, Tally } = require("./protocol.cjs");

const s = settings();
const QUEUE = "bench";
const steps = stepsOf(s.shape);
const tally = new Tally(s.shape);
let logged = 0;

serve(async () => {
  const { PgBoss } = await import("pg-boss");
  const boss = new PgBoss({ connectionString: s.url, useListenNotify: true });
  boss.on("error", () => logged++);
  boss.on("warning", () => logged++);
  await boss.start();
  await boss.createQueue(QUEUE, { notify: true });
  const { client, pid } = await producer(s.url);
  // The producer's inserts go through its own connection, whose server CPU is not the drain's.
  const db = { executeSql: (text, values) => client.query(text, values) };
  await boss.work(
    QUEUE,
    { batchSize: s.concurrency, burstWhenBatchFull: true, localConcurrency: 1 },
    async (jobs) => {
      const next = [];
      for (const { data } of jobs) {
        tally.step(data.u, data.s);
        const at = steps.indexOf(data.s);
        if (at + 1 < steps.length) next.push({ data: { u: data.u, s: steps[at + 1] } });
      }
      if (next.length > 0) await boss.insert(QUEUE, next);
      for (const { data } of jobs) if (data.s === steps[steps.length - 1]) tally.finished(data.u);
    },
  );
  const first = (u) => ({ data: { u, s: steps[0] } });
  return {
    answer: { producerPid: pid },
    handlers: {
      backlog: async ({ from, n }) => {
        tally.resetWindow();
        const jobs = Array.from({ length: n }, (_, i) => first(from + i));
        await boss.insert(QUEUE, jobs, { db });
        return {};
      },
      wait: ({ until }) => tally.until(until),
      paced: async ({ from, count, rate }) => ({
        latencies: await paced(
          tally,
          from,
          count,
          rate,
          (u) => boss.send(QUEUE, first(u).data, { db }),
        ),
      }),
      ledger: async () => ({ rows: await tally.write(client), logged }),
      stop: async () => {
        await boss.stop({ graceful: true });
        await client.end();
        return {};
      },
    },
  };
});
