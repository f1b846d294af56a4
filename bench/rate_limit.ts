/**
 * `deno run -A bench/rate_limit.ts [--keys N] [--per-key N] [--limit N] [--workers N]`
 *
 * A rate limit under real workers (docs/flow-control.md, Rate limits): one map step limited to
 * `--limit` starts per second per key, `--keys` keys (default 20) with `--per-key` tasks each
 * (default 20), all started at once, drained by `--workers` workers (default 2) created with
 * `createWorker` and their default timers (the release rides the schedule ticker, each second).
 * Prints the achieved rate per key against the limit (tasks after the first window, over the time
 * from the first start to the last), the drain against its ideal, the most starts of one key in
 * any one-second window (from the recorded start times: never above the limit), and how many
 * claims the window sent back. DATABASE_URL, or a throw-away local Postgres started here. Figures
 * only; nothing here asserts on speed.
 *
 * @module
 */
import postgres from "postgres";
import { openPgflowDatabase } from "../local/database.ts";
import { createLogger, Flow, type FlowWorker, routeFlow } from "../mod.ts";
import { anyWorker } from "./engine.ts";
import { fixed, textTable } from "./stats.ts";

/** `--name value` from the command line, else `fallback`. */
function option(name: string, fallback: number): number {
  const at = Deno.args.indexOf(`--${name}`);
  if (at < 0) return fallback;
  const value = Number(Deno.args[at + 1]);
  if (!Number.isInteger(value) || value <= 0) {
    throw new Error(`--${name} needs a positive integer, got ${Deno.args[at + 1]}`);
  }
  return value;
}

const KEYS = option("keys", 20);
const PER_KEY = option("per-key", 20);
const LIMIT = option("limit", 2);
const WORKERS = option("workers", 2);
const QUEUE = "bench_rate";

const flow = routeFlow(
  new Flow<{ k: string }[]>({ slug: "bench_rate" })
    .map(
      {
        slug: "send",
        rateLimit: { limit: LIMIT, per: "1 second", key: "$.k", keyFrom: "input" },
      },
      (item) => item.k,
    ),
  { queues: { send: QUEUE } },
);

const db = await openPgflowDatabase();
const sql = postgres(db.url, { max: 2, onnotice: () => {} });
const workers: FlowWorker[] = [];
try {
  let rejected = 0;
  for (let i = 0; i < WORKERS; i++) {
    const worker = anyWorker(flow, {
      connectionString: db.url,
      queueName: QUEUE,
      maxConcurrent: 10,
      logger: createLogger({
        level: "debug",
        sink: (r) => {
          if (r.event === "message not claimed (rate_limited)") rejected++;
        },
      }),
    });
    await worker.start();
    workers.push(worker);
  }
  const keys = Array.from({ length: KEYS * PER_KEY }, (_, i) => ({ k: `key${i % KEYS}` }));
  const t0 = performance.now();
  await sql`select pgflow.start_flow('bench_rate', ${sql.json(keys)})`;
  for (;;) {
    const [{ n }] = await sql`select count(*)::int as n from pgflow.runs where status = 'started'`;
    if (n === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  const drain = (performance.now() - t0) / 1000;
  const [r] = await sql<{ rate: number; max_window: number }[]>`
    with per_key as (
      select rate_key, count(*) as n, extract(epoch from max(started_at) - min(started_at)) as span
      from pgflow.step_tasks where flow_slug = 'bench_rate' group by rate_key
    ),
    windows as (
      select count(*) over (partition by rate_key order by started_at
                            range between interval '999999 microseconds' preceding and current row) as n
      from pgflow.step_tasks where flow_slug = 'bench_rate'
    )
    select (select avg((n - ${LIMIT}) / nullif(span, 0)) from per_key)::float8 as rate,
           (select max(n) from windows)::int as max_window`;
  const ideal = Math.ceil(PER_KEY / LIMIT) - 1;
  console.log(textTable([
    [
      "keys × tasks",
      "limit /s",
      "achieved /s per key",
      "× limit",
      "drain s",
      "ideal s",
      "max in 1 s",
      "sent back",
    ],
    [
      `${KEYS} × ${PER_KEY}`,
      String(LIMIT),
      fixed(r.rate, 2),
      fixed(r.rate / LIMIT, 2),
      fixed(drain, 1),
      String(ideal),
      String(r.max_window),
      String(rejected),
    ],
  ]));
} finally {
  for (const w of workers) await w.stop();
  await sql.end();
  await db.close();
}
