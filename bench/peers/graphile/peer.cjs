/**
 * graphile-worker as a peer: one runner at PEER_CONCURRENCY, its other options at their defaults
 * (LISTEN/NOTIFY wake-ups, a 2 s poll as fallback, prepared statements, a pool of 10), logging to
 * an in-process sink. Single units are one job; chains are jobs a → b → c, each adding the next
 * (`helpers.addJob`, in its own statement) before it completes; a unit is done when its last job's
 * completion is committed (`job:complete`). Backlogs are added with the batch
 * `graphile_worker.add_jobs` in one statement.
 */
"use strict";
const { paced, producer, serve, settings, stepsOf, Tally } = require("./protocol.cjs");

const s = settings();
const steps = stepsOf(s.shape);
const tally = new Tally(s.shape);
let logged = 0;

function task(index) {
  const name = steps[index];
  return async (payload, helpers) => {
    tally.step(payload.u, name);
    if (index + 1 < steps.length) await helpers.addJob(steps[index + 1], payload);
  };
}

serve(async () => {
  const { Logger, run, runMigrations } = await import("graphile-worker");
  // Every level but debug, kept in the process (as an application's log sink would receive them).
  const logger = new Logger(() => (level) => {
    if (level !== "debug") logged++;
  });
  await runMigrations({ connectionString: s.url, logger });
  const runner = await run({
    connectionString: s.url,
    concurrency: s.concurrency,
    noHandleSignals: true,
    logger,
    taskList: Object.fromEntries(steps.map((name, i) => [name, task(i)])),
  });
  // A unit is done when its last job is completed (committed), not when its function returns.
  const last = steps[steps.length - 1];
  runner.events.on("job:complete", ({ job }) => {
    if (job.task_identifier === last) tally.finished(job.payload.u);
  });
  const { client, pid } = await producer(s.url);
  const add = (u) =>
    client.query("select graphile_worker.add_job($1, json_build_object('u', $2::int))", [
      steps[0],
      u,
    ]);
  return {
    answer: { producerPid: pid },
    handlers: {
      backlog: async ({ from, n }) => {
        tally.resetWindow();
        await client.query(
          `select count(*) from graphile_worker.add_jobs(array(
             select row($1, json_build_object('u', u), null, null, null, null, null, null)
                      ::graphile_worker.job_spec
             from generate_series($2::int, $3::int) u))`,
          [steps[0], from, from + n - 1],
        );
        return {};
      },
      wait: ({ until }) => tally.until(until),
      paced: async ({ from, count, rate }) => ({
        latencies: await paced(tally, from, count, rate, add),
      }),
      ledger: async () => ({ rows: await tally.write(client), logged }),
      stop: async () => {
        await runner.stop();
        await client.end();
        return {};
      },
    },
  };
});
