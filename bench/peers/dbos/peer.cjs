/**
 * DBOS Transact as a peer: a durable workflow whose steps run in this process with a checkpoint
 * each (`DBOS.runStep`), one for a single unit, a → b → c for a chain. PEER_MODE `queued`: units
 * go through a DBOS queue (`workerConcurrency` PEER_CONCURRENCY; PEER_POLL_MS, the queue's
 * `minPollingIntervalMs`, whose default is 1000); backlogs are enqueued with the public
 * `DBOSClient.enqueueInTransaction`, all in one commit. PEER_MODE `direct`: workflows started
 * in-process by calling them, PEER_CONCURRENCY at a time (a direct start has no backlog to drain:
 * the loop starts the next unit as one ends). The rest at DBOS's defaults; its logs go to an
 * in-process sink at info level.
 */
"use strict";
const { DBOS, DBOSClient } = require("@dbos-inc/dbos-sdk");
const { inOneCommit, paced, producer, serve, settings, stepsOf, Tally } = require("./protocol.cjs");

const s = settings();
if (s.mode !== "queued" && s.mode !== "direct") {
  throw new Error(`PEER_MODE must be queued or direct, got ${JSON.stringify(s.mode)}`);
}
const pollMs = Number(process.env.PEER_POLL_MS ?? "1000");
const APP = "pgflow-bench";
const QUEUE = "bench";
const steps = stepsOf(s.shape);
const tally = new Tally(s.shape);
let logged = 0;
const keep = () => logged++;
const logger = { info: keep, warn: keep, error: keep, debug: () => {} };

const workflow = DBOS.registerWorkflow(async (u) => {
  for (const name of steps) {
    await DBOS.runStep(() => Promise.resolve(tally.step(u, name)), { name });
  }
  // Queued: done when its function returns (its final status is written just after).
  if (s.mode === "queued") tally.finished(u);
}, { name: `bench_${s.shape}` });

/** Direct starts: `n` units from `from`, PEER_CONCURRENCY at a time; resolves when all are done. */
async function closedLoop(from, n) {
  let next = from;
  const lane = async () => {
    while (next < from + n) {
      const u = next++;
      await workflow(u);
      tally.finished(u);
    }
  };
  await Promise.all(Array.from({ length: Math.min(s.concurrency, n) }, lane));
}

serve(async () => {
  DBOS.setConfig({ name: APP, systemDatabaseUrl: s.url, logger });
  await DBOS.launch();
  if (s.mode === "queued") {
    await DBOS.registerQueue(QUEUE, {
      workerConcurrency: s.concurrency,
      minPollingIntervalMs: pollMs,
    });
  }
  const client = await DBOSClient.create({
    systemDatabaseUrl: s.url,
    applicationName: APP,
    logger,
  });
  const { client: pgClient, pid } = await producer(s.url);
  const options = { queueName: QUEUE, workflowName: `bench_${s.shape}` };
  let loop = Promise.resolve();
  return {
    answer: { producerPid: pid },
    handlers: {
      backlog: async ({ from, n }) => {
        tally.resetWindow();
        if (s.mode === "direct") {
          loop = closedLoop(from, n).catch((error) => tally.fail(`${from}+`, error));
        } else {
          await inOneCommit(
            pgClient,
            from,
            n,
            (c, u) => client.enqueueInTransaction(c, options, u),
          );
        }
        return {};
      },
      wait: async ({ until }) => {
        const window = await tally.until(until);
        await loop;
        return window;
      },
      paced: async ({ from, count, rate }) => ({
        latencies: await paced(tally, from, count, rate, async (u) => {
          if (s.mode === "queued") {
            await DBOS.startWorkflow(workflow, { queueName: QUEUE })(u);
          } else {
            workflow(u).then(() => tally.finished(u), (error) => tally.fail(u, error));
          }
        }),
      }),
      ledger: async () => ({ rows: await tally.write(pgClient), logged }),
      stop: async () => {
        await client.destroy();
        await pgClient.end();
        await DBOS.shutdown();
        return {};
      },
    },
  };
});
