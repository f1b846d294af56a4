/**
 * Helpers for tests that drive the SQL engine directly: define flows, register workers, read and
 * claim messages the way a worker does, and look inside queues.
 *
 * @module
 */
import type postgres from "postgres";
import {
  type CompilableFlow,
  extractAlias,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "../../src/compile/shape.ts";

type Sql = postgres.Sql | postgres.TransactionSql;

/** One step of a test flow. */
export interface TestStep {
  slug: string;
  deps?: string[];
  queue?: string;
  type?: "single" | "map";
  maxAttempts?: number;
  baseDelay?: number;
  timeout?: number;
  startDelay?: number;
}

/** Options of a test flow. */
export interface TestFlowOptions {
  mode?: "flow" | "step" | "routed";
  maxAttempts?: number;
  baseDelay?: number;
  timeout?: number;
}

/**
 * Creates a flow and its steps through pgflow.create_flow / pgflow.add_step.
 *
 * @example
 * ```ts
 * await defineFlow(sql, "triage", [{ slug: "a", queue: "q1" }, { slug: "b", deps: ["a"], queue: "q2" }], { mode: "routed" });
 * ```
 */
export async function defineFlow(
  sql: Sql,
  slug: string,
  steps: TestStep[],
  options: TestFlowOptions = {},
): Promise<void> {
  await sql`select pgflow.create_flow(${slug}, ${options.maxAttempts ?? 3}, ${
    options.baseDelay ?? 1
  }, ${options.timeout ?? 60}, ${options.mode ?? "flow"})`;
  for (const s of steps) {
    await sql`select pgflow.add_step(
      flow_slug => ${slug}, step_slug => ${s.slug}, deps_slugs => ${s.deps ?? []}::text[],
      max_attempts => ${s.maxAttempts ?? null}::int, base_delay => ${s.baseDelay ?? null}::int,
      timeout => ${s.timeout ?? null}::int, start_delay => ${s.startDelay ?? 0},
      step_type => ${s.type ?? "single"}, queue_name => ${s.queue ?? null}::text)`;
  }
}

/**
 * Registers a worker on a queue and returns its id.
 *
 * @example
 * ```ts
 * const workerId = await registerWorker(sql, "thread_processing");
 * ```
 */
export async function registerWorker(sql: Sql, queue: string, fn = "test_fn"): Promise<string> {
  const id = crypto.randomUUID();
  await sql`select pgflow.register_worker(${id}, ${queue}, ${fn})`;
  return id;
}

/** One row of pgflow.start_tasks. */
export interface ClaimRow {
  message_id: string;
  disposition: "claimed" | "started" | "ineligible" | "unknown" | "unsupported";
  flow_slug: string | null;
  run_id: string | null;
  step_slug: string | null;
  task_index: number | null;
  input: unknown;
  attempt: number | null;
}

/**
 * Calls pgflow.start_tasks with exact message ids (as decimal strings).
 *
 * @example
 * ```ts
 * const rows = await startTasks(sql, "q", ["1", "2"], workerId, [["triage", "classify"]]);
 * ```
 */
export async function startTasks(
  sql: Sql,
  queue: string,
  ids: string[],
  workerId: string,
  supported: [string, string][],
): Promise<ClaimRow[]> {
  return await sql<ClaimRow[]>`
    select * from pgflow.start_tasks(${queue}, ${ids}::bigint[], ${workerId}, ${
    sql.json(supported)
  })`;
}

/**
 * Reads up to `qty` visible messages (like a worker's poll) and claims them; returns the claim rows.
 *
 * @example
 * ```ts
 * const claimed = (await readAndStart(sql, "q", workerId, [["f", "s"]])).filter((r) => r.disposition === "claimed");
 * ```
 */
export async function readAndStart(
  sql: Sql,
  queue: string,
  workerId: string,
  supported: [string, string][],
  qty = 10,
): Promise<ClaimRow[]> {
  const msgs = await sql<{ msg_id: string }[]>`select msg_id from pgmq.read(${queue}, 5, ${qty})`;
  if (msgs.length === 0) return [];
  return await startTasks(sql, queue, msgs.map((m) => m.msg_id), workerId, supported);
}

/** A message row as stored in a queue or archive table. */
export interface StoredMessage {
  msg_id: string;
  read_ct: number;
  vt: Date;
  message: unknown;
  vt_in_seconds: number;
}

/**
 * The live messages of a queue, straight from its table (tests may look; product SQL may not).
 *
 * @example
 * ```ts
 * const msgs = await queueMessages(sql, "q");
 * ```
 */
export async function queueMessages(sql: Sql, queue: string): Promise<StoredMessage[]> {
  return await sql.unsafe<StoredMessage[]>(
    `select msg_id, read_ct, vt, message,
            extract(epoch from vt - clock_timestamp())::float8 as vt_in_seconds
     from pgmq.${escapeIdent(`q_${queue.toLowerCase()}`)} order by msg_id`,
  );
}

/**
 * The archived messages of a queue.
 *
 * @example
 * ```ts
 * const archived = await archivedMessages(sql, "q");
 * ```
 */
export async function archivedMessages(sql: Sql, queue: string): Promise<StoredMessage[]> {
  return await sql.unsafe<StoredMessage[]>(
    `select msg_id, read_ct, vt, message, 0::float8 as vt_in_seconds
     from pgmq.${escapeIdent(`a_${queue.toLowerCase()}`)} order by msg_id`,
  );
}

function escapeIdent(name: string): string {
  return `"${name.replaceAll('"', '""')}"`;
}

/**
 * Makes every message of a queue visible now (tests skip retry delays this way).
 *
 * @example
 * ```ts
 * await makeVisible(sql, "q");
 * ```
 */
export async function makeVisible(sql: Sql, queue: string): Promise<void> {
  await sql.unsafe(
    `update pgmq.${escapeIdent(`q_${queue.toLowerCase()}`)} set vt = clock_timestamp()`,
  );
}

/**
 * Task rows of a run, ordered by step and index.
 *
 * @example
 * ```ts
 * const tasks = await runTasks(sql, runId);
 * ```
 */
export async function runTasks(sql: Sql, runId: string): Promise<Record<string, unknown>[]> {
  return await sql`select * from pgflow.step_tasks where run_id = ${runId} order by step_slug, task_index`;
}

/** The answer of pgflow.ensure_flow_compiled. */
export interface CompileResult {
  status: "compiled" | "verified" | "mismatch" | "recompiled";
  differences: string[];
  /** Options that differ from the stored ones (see pgflow._option_differences). */
  optionDifferences: {
    step: string | null;
    option: string;
    stored: number | null;
    supplied: number | null;
  }[];
}

/**
 * Sends a flow's shape, route plan and options to pgflow.ensure_flow_compiled, as a worker does.
 *
 * @example
 * ```ts
 * const { status } = await compileFlow(sql, routeFlow(flow, { queues: { a: "work" } }));
 * ```
 */
export async function compileFlow(sql: Sql, target: CompilableFlow): Promise<CompileResult> {
  const slug = "flow" in target && "mode" in target
    ? target.flow.slug
    : (target as { slug: string }).slug;
  const [{ result }] = await sql`select pgflow.ensure_flow_compiled(${slug}, ${
    sql.json(extractFlowShape(target) as never)
  }, ${sql.json(extractRoutePlan(target) as never)}, ${
    sql.json(extractFlowOptions(target) as never)
  }, ${extractAlias(target)}::text) as result`;
  return result as CompileResult;
}

/**
 * Tells senders that a session waits for `channels` (pgflow notifies a channel only while someone
 * does, see supabase/schemas/0045_listeners.sql) and waits out the senders that looked before.
 * `sql` must stay open for as long as the notifications are wanted: the rows name its backend.
 */
export async function waitForNotifications(sql: Sql, channels: string[]): Promise<void> {
  await sql`select pgflow.listen_start(${channels}::text[])`;
  const [{ passed }] = await sql<{ passed: boolean }[]>`
    select pgflow.listen_barrier(${channels}::text[]) as passed`;
  if (!passed) throw new Error(`listen_barrier did not pass for ${channels.join(", ")}`);
}

/**
 * Returns once every notification committed before the call has reached `listener`'s handlers: a
 * session receives notifications in commit order, so once a marker sent after them has arrived,
 * so have they. What was not heard by then was never sent; no sleep can say as much on a busy
 * machine. `listener` is the pool whose `listen` handlers collect what is heard; `sender` any other.
 *
 * @example
 * ```ts
 * await sql`select pgflow.start_flow('f', '{}')`;
 * await allNotified(listener, sql);
 * assert.deepEqual(heard, [""]);
 * ```
 */
export async function allNotified(listener: postgres.Sql, sender: Sql): Promise<void> {
  const channel = "pgflow_test_all_notified";
  const marker = crypto.randomUUID();
  let arrived!: () => void;
  const heard = new Promise<void>((resolve) => (arrived = resolve));
  const subscription = await listener.listen(channel, (p) => p === marker && arrived());
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await sender`select pg_notify(${channel}, ${marker})`;
    await Promise.race([
      heard,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error("the marker notification did not arrive within 60 s")),
          60_000,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
    await subscription.unlisten();
  }
}
