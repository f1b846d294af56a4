/**
 * `deno task demo [--runs N] [--concurrency N] [--slack-concurrency N] [--failure-rate P]`
 *
 * Starts (or uses `DATABASE_URL`) a database, defines two versions of a triage flow on shared
 * queues, runs one worker per queue in this process, starts N runs split across both versions,
 * shows live progress and ends with a summary table.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createClient, createLogger, createWorker, type FlowRun } from "../mod.ts";

import { demoFlows } from "./flows.ts";

const HELP = `pgflow demo: two triage versions on shared queues, one worker per queue.

usage: deno task demo [options]

  --runs N               runs to start, split across both versions (default 200)
  --concurrency N        tasks in flight on demo_processing (default 8)
  --slack-concurrency N  tasks in flight on demo_slack, the rate-limited pool (default 2)
  --failure-rate P       probability a handler call fails, 0..1 (default 0.05); retried up to 3 attempts
  --max-latency MS       simulated work per call, up to MS milliseconds (default 20)
  --help                 this text

Uses DATABASE_URL when set; otherwise starts a throw-away local Postgres.`;

interface Options {
  runs: number;
  concurrency: number;
  slackConcurrency: number;
  failureRate: number;
  maxLatency: number;
}

function parseOptions(args: string[]): Options {
  const o: Options = {
    runs: 200,
    concurrency: 8,
    slackConcurrency: 2,
    failureRate: 0.05,
    maxLatency: 20,
  };
  const names: Record<string, [keyof Options, (v: number) => boolean, string]> = {
    "--runs": [
      "runs",
      (v) => Number.isInteger(v) && v >= 1 && v <= 100_000,
      "an integer from 1 to 100000",
    ],
    "--concurrency": [
      "concurrency",
      (v) => Number.isInteger(v) && v >= 1 && v <= 100,
      "an integer from 1 to 100",
    ],
    "--slack-concurrency": [
      "slackConcurrency",
      (v) => Number.isInteger(v) && v >= 1 && v <= 100,
      "an integer from 1 to 100",
    ],
    "--failure-rate": ["failureRate", (v) => v >= 0 && v < 1, "a number from 0 to below 1"],
    "--max-latency": [
      "maxLatency",
      (v) => Number.isInteger(v) && v >= 0 && v <= 10_000,
      "milliseconds from 0 to 10000",
    ],
  };
  for (let i = 0; i < args.length; i++) {
    if (args[i] === "--help" || args[i] === "-h") {
      console.log(HELP);
      Deno.exit(0);
    }
    const spec = names[args[i]];
    const value = Number(args[i + 1]);
    if (!spec) fail(`unknown option ${args[i]}`);
    if (args[i + 1] === undefined || !spec[1](value)) {
      fail(`${args[i]} needs ${spec[2]}, got ${args[i + 1] ?? "nothing"}`);
    }
    o[spec[0]] = value;
    i++;
  }
  return o;
}

function fail(message: string): never {
  console.error(`${message}\n\n${HELP}`);
  Deno.exit(2);
}

function table(rows: string[][]): string {
  const widths = rows[0].map((_, i) => Math.max(...rows.map((r) => r[i].length)));
  return rows.map((r, n) =>
    r.map((c, i) => (i === 0 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join("  ") +
    (n === 0 ? `\n${widths.map((w) => "-".repeat(w)).join("  ")}` : "")
  ).join("\n");
}

async function main() {
  const opts = parseOptions(Deno.args);
  console.log(
    `pgflow demo: ${opts.runs} runs, concurrency ${opts.concurrency} (slack ${opts.slackConcurrency}), failure rate ${opts.failureRate}`,
  );
  const db = await openPgflowDatabase();
  console.log(
    `database: ${db.local ? "throw-away local Postgres" : "DATABASE_URL"} (PGMQ: ${db.pgmq})`,
  );
  const sql = postgres(db.url, { max: 2, prepare: false, onnotice: () => {} });
  // Runs are started through the typed client; the progress lines below are aggregate SQL.
  const client = createClient({ connectionString: db.url });
  const flows = demoFlows({ failureRate: opts.failureRate, maxLatencyMs: opts.maxLatency });
  const common = {
    // Task-level logs would drown the progress lines, and the injected failures are retried
    // (each a `warn`): errors only, so a run that really fails still shows.
    logger: createLogger({ level: "error" }),
    connectionString: db.url,
    maxPollSeconds: 1,
    pollIntervalMs: 50,
    functionName: "demo",
  };
  const workers = [
    createWorker(flows, {
      ...common,
      queueName: "demo_processing",
      maxConcurrent: opts.concurrency,
      batchSize: opts.concurrency,
    }),
    createWorker(flows, {
      ...common,
      queueName: "demo_slack",
      maxConcurrent: opts.slackConcurrency,
      batchSize: opts.slackConcurrency,
    }),
  ];
  const started = performance.now();
  try {
    for (const w of workers) await w.start();
    console.log(
      `workers: ${
        workers.map((w) => `${w.queueName} serves ${w.supportSet.length} (flow, step) pairs`).join(
          "; ",
        )
      }`,
    );

    const [v1, v2] = flows;
    const runs: (FlowRun<typeof v1> | FlowRun<typeof v2>)[] = [];
    for (let i = 0; i < opts.runs; i++) {
      const input = { threadId: `t${i}`, text: i % 5 === 0 ? "site is down" : "hello there" };
      runs.push(
        i % 2 === 0 ? await client.startFlow(v1, input) : await client.startFlow(v2, input),
      );
    }
    const runIds = runs.map((r) => r.runId);
    // One run watched live, as an application would: its events, in order, as they happen.
    const watched = (async () => {
      const lines: string[] = [];
      for await (const e of runs[0].events()) {
        lines.push("stepSlug" in e && e.stepSlug ? `${e.type} ${e.stepSlug}` : e.type);
      }
      return lines;
    })();

    for (;;) {
      const [p] = await sql`
        select count(*) filter (where r.status = 'completed')::int as completed,
               count(*) filter (where r.status = 'failed')::int as failed
        from pgflow.runs r where r.run_id = any (${runIds}::uuid[])`;
      const perQueue = await sql`
        select t.queue_name, count(*) filter (where t.status = 'completed')::int as done,
               coalesce(sum(greatest(t.attempts_count - 1, 0)), 0)::int as retries
        from pgflow.step_tasks t where t.run_id = any (${runIds}::uuid[]) group by 1 order by 1`;
      const secs = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `[${secs.padStart(5)}s] runs ${
          p.completed + p.failed
        }/${opts.runs} (failed ${p.failed})  ` +
          perQueue.map((q) => `${q.queue_name}: ${q.done} tasks, ${q.retries} retries`).join("  "),
      );
      if (p.completed + p.failed === opts.runs) break;
      await new Promise((r) => setTimeout(r, 1000));
    }
    const elapsed = (performance.now() - started) / 1000;
    console.log(
      `\nrun ${runIds[0]} (${runs[0].flowSlug}), as its events came: ${(await watched).join(", ")}`,
    );

    const byFlow = await sql`
      select r.flow_slug, count(*)::int as runs,
             count(*) filter (where r.status = 'completed')::int as completed,
             count(*) filter (where r.status = 'failed')::int as failed,
             round(avg(extract(epoch from coalesce(r.completed_at, r.failed_at) - r.started_at)) * 1000)::int as avg_ms
      from pgflow.runs r where r.run_id = any (${runIds}::uuid[]) group by 1 order by 1`;
    const byQueue = await sql`
      select t.queue_name, count(*)::int as tasks,
             count(*) filter (where t.status = 'completed')::int as completed,
             coalesce(sum(greatest(t.attempts_count - 1, 0)), 0)::int as retries,
             count(distinct t.flow_slug || '.' || t.step_slug)::int as pairs
      from pgflow.step_tasks t where t.run_id = any (${runIds}::uuid[]) group by 1 order by 1`;
    console.log(
      `\nsummary (${elapsed.toFixed(1)} s, ${(opts.runs / elapsed).toFixed(1)} runs/s)\n`,
    );
    console.log(table([
      ["flow", "runs", "completed", "failed", "avg run ms"],
      ...byFlow.map((
        f,
      ) => [f.flow_slug, `${f.runs}`, `${f.completed}`, `${f.failed}`, `${f.avg_ms}`]),
    ]));
    console.log();
    console.log(table([
      ["queue", "(flow, step) pairs", "tasks", "completed", "retries"],
      ...byQueue.map((
        q,
      ) => [q.queue_name, `${q.pairs}`, `${q.tasks}`, `${q.completed}`, `${q.retries}`]),
    ]));
  } finally {
    for (const w of workers) await w.stop().catch(() => {});
    await client.close();
    await sql.end();
    await db.close();
  }
}

if (import.meta.main) await main();
