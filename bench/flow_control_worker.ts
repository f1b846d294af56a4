/**
 * Child process of the flow-control exactness bench (`flow_control.ts`): two workers in one
 * process, through `createWorker`, on a step limited to 3 tasks at once per key. Every handler
 * run writes a ledger row (run, attempt, this process's pid) before it returns, so the parent can
 * tell a task run twice from a task recovered after this process was killed. Prints one JSON line
 * when both workers poll, then runs until it is killed or its stdin closes.
 *
 * usage: deno run -A bench/flow_control_worker.ts URL
 *
 * @module
 */
import { createLogger, createWorker, Flow } from "../mod.ts";
import { sleep } from "./clock.ts";

/** The limit per key the parent checks. */
export const EXACT_LIMIT = 3;
/** The exactness flow's slug. */
export const EXACT_SLUG = "bench_fc_exact";

/**
 * One step, limited per `$.k` of the run input. A short timeout, so that the tasks of a killed
 * process are recovered about 33 s (timeout + the stalled margin) after they started.
 */
const exactFlow = new Flow<{ k: string }>({ slug: EXACT_SLUG }).step({
  slug: "work",
  timeout: 3,
  concurrency: { limit: EXACT_LIMIT, key: "$.k" },
}, async (_input, ctx): Promise<number> => {
  await ctx.sql`insert into bench_fc_ledger (run_id, attempt, pid)
                values (${ctx.stepTask.run_id}, ${ctx.attempt}, ${Deno.pid})`;
  // Long enough that the tasks of one key overlap, short enough for thousands a minute.
  await sleep(10 + Math.random() * 20);
  return 1;
});

if (import.meta.main) {
  const [url] = Deno.args;
  const workers = [0, 1].map(() =>
    createWorker(exactFlow, {
      connectionString: url,
      maxConcurrent: 10,
      batchSize: 10,
      pollIntervalMs: 50,
      maxPollSeconds: 2,
      stalledRecoveryIntervalMs: 2000,
      heartbeatIntervalMs: 1000,
      functionName: "bench_fc",
      logger: createLogger({ level: "error" }),
    })
  );
  for (const w of workers) await w.start();
  console.log(JSON.stringify({ event: "ready", pid: Deno.pid }));
  // The parent ends this process by closing stdin (or by SIGKILL, mid-run).
  for await (const _ of Deno.stdin.readable) { /* drain */ }
  await Promise.all(workers.map((w) => w.stop()));
}
