/**
 * The soak: the load scenario at full size with every fault at once, on a Postgres of its own.
 * 4 in-process workers (2 per shared queue) run 5,000 tasks with seeded handler failures while
 * backends are terminated at random, a worker process is killed with SIGKILL mid-batch and
 * Postgres is restarted; then every invariant is checked and the figures are printed.
 *
 * `deno task soak [--tasks 5000] [--fail-rate 0.15] [--seed N] [--terminate-every-ms 1000]
 *                 [--no-kill] [--no-restart] [--timeout-s 600]`
 *
 * @module
 */
import postgres from "postgres";
import { createLogger, createWorker, type FlowWorker } from "../../mod.ts";
import { installPgmq } from "../../src/cli/db/pgmq.ts";
import { startLocalPostgres } from "../../src/cli/db/launcher.ts";
import { applyMigrations } from "../../local/db_push.ts";
import { compileFlow } from "../support/engine.ts";
import { killChild, spawnDeno } from "../e2e/process.ts";
import {
  backdateStuck,
  checkInvariants,
  createExecLog,
  loadV1,
  loadV2,
  orphan,
  ORPHAN_FLOW,
  QUEUES,
  repeat,
  sendForeignMessages,
  startLoadRuns,
  TASKS_PER_RUN,
  waitForLoadRuns,
} from "./harness.ts";

/** `--name value` and `--flag` / `--no-flag`; no dependency needed for seven options. */
function parseFlags(argv: string[]): Record<string, string | boolean> {
  const out: Record<string, string | boolean> = {
    tasks: "5000",
    "fail-rate": "0.15",
    "terminate-every-ms": "1000",
    "timeout-s": "600",
    kill: true,
    restart: true,
    help: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i].replace(/^--/, "");
    if (name === "help" || name === "h") out.help = true;
    else if (name.startsWith("no-") && name.slice(3) in out) out[name.slice(3)] = false;
    else if (name in out && typeof out[name] === "string" && i + 1 < argv.length) {
      out[name] = argv[++i];
    } else if (name === "seed" && i + 1 < argv.length) out.seed = argv[++i];
    else {
      console.error(`unknown option ${argv[i]}; see --help`);
      Deno.exit(2);
    }
  }
  return out;
}
const args = parseFlags(Deno.args);
if (args.help) {
  console.log(`deno task soak [options]
  --tasks N               tasks to run (rounded up to whole runs of ${TASKS_PER_RUN}); default 5000
  --fail-rate P           probability that one handler attempt throws; default 0.15
  --seed N                seed of the injected failures; default random (printed)
  --terminate-every-ms M  terminate a random worker backend this often (0: never); default 1000
  --no-kill               do not SIGKILL a worker process mid-batch
  --no-restart            do not restart Postgres mid-run
  --timeout-s S           give up after S seconds; default 600
Exits 1 when an invariant is broken.`);
  Deno.exit(0);
}
const runs = Math.ceil(Number(args.tasks) / TASKS_PER_RUN);
const failRate = Number(args["fail-rate"]);
const seed = typeof args.seed === "string"
  ? Number(args.seed)
  : Math.floor(Math.random() * 2 ** 31);
const terminateEvery = Number(args["terminate-every-ms"]);
const say = (msg: string) =>
  console.log(`[soak ${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}`);
const t0 = performance.now();

const pg = await startLocalPostgres();
const sql = postgres(pg.url, { max: 3, onnotice: () => {} });
const workers: FlowWorker[] = [];
const script = new URL("./fixtures/load_worker.ts", import.meta.url).pathname;
let child: ReturnType<typeof spawnDeno> | undefined;
let exitCode = 0;
try {
  await installPgmq(sql);
  await applyMigrations(sql);
  await createExecLog(sql);
  await compileFlow(sql, orphan);
  say(`seed ${seed}; ${runs} runs × ${TASKS_PER_RUN} tasks; fail rate ${failRate}`);

  if (args.kill) {
    // Starts first, so its batch holds work when it dies; its handlers hang until then.
    child = spawnDeno(script, {
      DATABASE_URL: pg.url,
      FUNCTION_NAME: "doomed",
      DELAY_MS: "600000",
    });
  }
  const logger = createLogger({ level: "error", sink: () => {} });
  for (const queue of [...QUEUES, ...QUEUES]) {
    const worker = createWorker([loadV1, loadV2], {
      queueName: queue,
      connectionString: pg.url,
      maxConcurrent: 10,
      batchSize: 10,
      visibilityTimeout: 2,
      maxPollSeconds: 1,
      pollIntervalMs: 20,
      stalledRecoveryIntervalMs: 500,
      heartbeatIntervalMs: 1000,
      logger,
      context: { load: { failRate, seed, delayMs: 0 } },
    });
    workers.push(worker);
    await worker.start();
  }
  for (let i = 0; i < 3; i++) {
    await sql`select pgflow.start_flow(${ORPHAN_FLOW}, '{"n": 1}'::jsonb)`;
  }
  const foreign = await sendForeignMessages(sql);
  if (child) {
    const started = Date.now();
    while (!child.output().includes("started ") && Date.now() - started < 30_000) {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  await startLoadRuns(sql, runs);
  say("runs started");

  let killed = 0;
  if (child) {
    await new Promise((r) => setTimeout(r, 1500));
    await killChild(child, "SIGKILL");
    killed = 1;
    say("worker process killed with SIGKILL");
  }

  let terminated = 0;
  const stopTerminating = terminateEvery > 0
    ? repeat(terminateEvery, async () => {
      const [row] = await sql`
        select count(*) filter (where pg_terminate_backend(pid))::int as n from (
          select pid from pg_stat_activity
          where datname = current_database() and pid <> pg_backend_pid() and state = 'active'
            and query ~ 'pgflow\\.(start_tasks|complete_task|fail_task)|pgmq\\.read'
          order by random() limit 1) s`;
      terminated += row.n;
    })
    : () => Promise.resolve();
  let backdated = 0;
  const stopBackdating = repeat(500, async () => (backdated += await backdateStuck(sql, 4000)));

  let restarts = 0;
  if (args.restart) {
    await new Promise((r) => setTimeout(r, 3000));
    await pg.stop();
    await new Promise((r) => setTimeout(r, 1500));
    await pg.start();
    restarts = 1;
    say("Postgres restarted");
  }
  try {
    await waitForLoadRuns(sql, Number(args["timeout-s"]) * 1000);
  } finally {
    await stopTerminating();
    await stopBackdating();
  }
  say("all runs terminal; stopping workers");
  await Promise.all(workers.map((w) => w.stop()));
  const figures = await checkInvariants(sql, foreign);
  const report = {
    seed,
    tasks: figures.tasks,
    runs: figures.runs,
    completedRuns: figures.completedRuns,
    failedRuns: figures.failedRuns,
    handlerExecutions: figures.executions,
    injectedFailures: figures.injectedFailures,
    backendsTerminated: terminated,
    workerProcessesKilled: killed,
    postgresRestarts: restarts,
    stuckTasksBackdated: backdated,
    stalledRecoveries: figures.stalledRecoveries,
    foreignMessagesUntouched: foreign.length,
    lost: figures.lost,
    duplicated: figures.duplicated,
    seconds: Math.round((performance.now() - t0) / 1000),
  };
  console.log(JSON.stringify(report, null, 2));
} catch (error) {
  console.error(`SOAK FAILED: ${(error as Error).message}`);
  exitCode = 1;
} finally {
  if (child) await killChild(child);
  await Promise.all(workers.map((w) => w.stop()));
  await sql.end({ timeout: 1 });
  await pg.destroy();
}
Deno.exit(exitCode);
