/**
 * `createClient`: start runs of typed flows, wait for them, watch their progress.
 *
 * @module
 */
import type { AnyFlow, FlowCarrier } from "../dsl/extract.ts";
import { FLOW_CONTROL_BOUNDS } from "../dsl/flow_control.ts";
import { parseDatabaseUrl } from "../platform/database_url.ts";
import { createPool, type PoolOptions } from "../platform/pool.ts";
import { jsonText } from "../util/json_write.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { Backend } from "./backend.ts";
import { ClientClosedError, InputValidationError, StartFlowError } from "./errors.ts";
import { checkedInput } from "./known_flows.ts";
import { type FlowRun, runHandle } from "./run_handle.ts";
import { sqlBackend } from "./sql_backend.ts";
import { explainUnreachable } from "./unreachable.ts";
import { type ScheduleClient, scheduleClient } from "./schedules.ts";
import { DatabaseConnectionError, withoutStack } from "../operations/connection_problem.ts";
import { supabaseBackend } from "./supabase_backend.ts";
import {
  checkAddress,
  type EventAddress,
  type EventPayloadOf,
  type EventStepSlug,
  prepareEvent,
  type SendEventResult,
  toSendEventResult,
} from "./events.ts";
import { activeTraceparent } from "../telemetry/attempts.ts";
import {
  checkListRunsOptions,
  checkStartManyOptions,
  checkStartOptions,
  resolveClientOptions,
  type ResolvedConnection,
} from "./options.ts";
import type { FlowInputOf, QueueWaitingTasks, RunState, RunStatus, RunSummary } from "./types.ts";

/**
 * Timing shared by every way of connecting: whole milliseconds, each within its range, or
 * `createClient` throws a `ClientConfigError` naming the option, the value and the range.
 *
 * @example
 * ```ts
 * import type { ClientTiming } from "@pgflow/shared";
 *
 * const timing: ClientTiming = { pollIntervalMs: 250, maxPollIntervalMs: 2_000 };
 * ```
 */
export interface ClientTiming {
  /**
   * When polling: the first wait (ms) between readings of a run, doubled while nothing changes;
   * 10 to 60,000, at most `maxPollIntervalMs`; default 250.
   */
  readonly pollIntervalMs?: number;
  /** When polling: the longest wait (ms) between readings; 10 to 600,000; default 2,000. */
  readonly maxPollIntervalMs?: number;
  /**
   * With LISTEN or Realtime: how often (ms) a run is read anyway, in case a notification was lost;
   * 100 to 3,600,000; default 5,000.
   */
  readonly safetyIntervalMs?: number;
  /** Bound (ms) of every query the client sends (postgres.js only); 500 to 600,000; default 20,000. */
  readonly queryTimeoutMs?: number;
}

/**
 * The flows a client starts by name. Give every version of a flow started through an alias, so
 * `startFlow("order", input)` checks `input` with the input schema of the version the alias points
 * at now (read from the database at each start; an activation between that read and the start
 * leaves the check to the worker, which makes it before any step runs). A slug checks with its
 * flow's schema. A name whose flow was not given is not checked here.
 *
 * @example
 * ```ts
 * import { type ClientFlows, Flow } from "@pgflow/shared";
 *
 * const v1 = new Flow<{ id: number }>({ slug: "order_v1", alias: "order" }).step({ slug: "a" }, () => 1);
 * const flows: ClientFlows = { flows: [v1] };
 * ```
 */
export interface ClientFlows {
  /**
   * Flows, routed or step-queued flows (each version once) whose schemas check the inputs
   * `startFlow` and `retry` start by name; default none.
   */
  readonly flows?: readonly FlowCarrier[];
}

/**
 * Options of {@link createClient}: a postgres.js pool, a connection string, or a supabase-js
 * client.
 *
 * - `{ sql }`: your pool (best made with `createPool`); never ended by the client. `transport`
 *   `auto` (default) uses LISTEN on a direct connection and polls otherwise (a pool gives no URL,
 *   so a pooler's mode cannot be told: pass `url` or `transport: "listen"` for a session pooler).
 * - `{ connectionString }`: the client opens a pool with `createPool` and ends it in `close()`;
 *   LISTEN on a direct connection or a session pooler, polling behind a transaction pooler.
 * - `{ supabase }`: `rpc` in the `pgflow` schema (exposed in the API settings), wake-ups by
 *   Supabase Realtime broadcast (`transport: "poll"` to poll instead).
 *
 * @example
 * ```ts
 * import type { ClientOptions } from "@pgflow/shared";
 *
 * const options: ClientOptions = { connectionString: "postgres://postgres@127.0.0.1:5432/postgres" };
 * ```
 */
export type ClientOptions =
  | (ClientTiming & ClientFlows & {
    readonly sql: Sql;
    readonly transport?: "auto" | "listen" | "poll";
    /** The pool's URL, if you have it: tells a session pooler from a transaction pooler. */
    readonly url?: string;
  })
  | (ClientTiming & ClientFlows & {
    readonly connectionString: string;
    readonly transport?: "auto" | "listen" | "poll";
    /** Options of the pool the client opens (default: at most 4 connections). */
    readonly pool?: PoolOptions;
  })
  | (ClientTiming & ClientFlows & {
    readonly supabase: SupabaseClient;
    readonly transport?: "realtime" | "poll";
  });

/**
 * Options of `client.startFlow`.
 *
 * @example
 * ```ts
 * import type { StartFlowOptions } from "@pgflow/shared";
 *
 * const options: StartFlowOptions = { runId: crypto.randomUUID() };
 * ```
 */
export interface StartFlowOptions {
  /**
   * The run's id (a UUID). Starting again with the same id returns the same run instead of a
   * second one: use it as an idempotency key (say, derived from a request id). A run of another
   * flow with that id is an error. The input of the second call is not compared.
   */
  readonly runId?: string;
  /**
   * The run's priority, -1,000 to 1,000 (default 0): its tasks that wait for capacity (a step's
   * concurrency limit, docs/flow-control.md) are released before those of lower-priority runs.
   */
  readonly priority?: number;
}

/**
 * Options of `client.startFlows`.
 *
 * @example
 * ```ts
 * import type { StartFlowsOptions } from "@pgflow/shared";
 *
 * const nightly: StartFlowsOptions = { priority: -10 };
 * ```
 */
export interface StartFlowsOptions {
  /** Every run's priority, -1,000 to 1,000 (default 0), as `StartFlowOptions.priority`. */
  readonly priority?: number;
}

/**
 * Filters of `client.listRuns`; every one given must match. Bad values reject with a
 * `ClientConfigError` naming the option, the value and what is accepted.
 *
 * @example
 * ```ts
 * import type { ListRunsOptions } from "@pgflow/shared";
 *
 * const lastHour: ListRunsOptions = {
 *   flow: "order_shipping",
 *   status: "failed",
 *   since: new Date(Date.now() - 3_600_000),
 *   limit: 100,
 * };
 * ```
 */
export interface ListRunsOptions {
  /** Runs of this flow (a slug, or the flow itself). */
  readonly flow?: string | FlowCarrier;
  /** Runs in this status. */
  readonly status?: RunStatus;
  /**
   * Runs started at or after this time: a `Date`, or an ISO time such as `2026-12-01T08:00Z`
   * (without a zone, UTC), in the years 0001 to 9999. An impossible date (`2026-02-31`) is refused.
   */
  readonly since?: Date | string;
  /** Runs whose id starts with this (hex digits and dashes, as printed). */
  readonly runIdPrefix?: string;
  /** At most this many, newest first: 1 to 1,000; default 50. */
  readonly limit?: number;
  /**
   * `false`: only runs never retried or resumed; `true`: only runs that were (their `restarts`
   * say as what). Default: both.
   */
  readonly restarted?: boolean;
}

/**
 * A client of the engine: {@link createClient} makes one.
 *
 * @example
 * ```ts
 * import type { PgflowClient } from "@pgflow/shared";
 *
 * async function status(client: PgflowClient, runId: string): Promise<string> {
 *   return (await client.getRun(runId))?.status ?? "unknown";
 * }
 * ```
 */
export interface PgflowClient {
  /**
   * Starts a run of `flow` (a flow, a routed or a step-queued flow) with `input`, typed from the
   * flow. Rejects with `StartFlowError` when the database refuses (an unknown flow: start a
   * worker for it first, so it is compiled). A flow with an input schema checks `input` first:
   * `InputValidationError` (a `StartFlowError`) lists the issues and no run is made; otherwise
   * the schema's value (after its transforms) is what the run stores.
   */
  startFlow<F extends FlowCarrier>(
    flow: F,
    input: FlowInputOf<F>,
    options?: StartFlowOptions,
  ): Promise<FlowRun<F>>;
  /**
   * Starts a run of the flow with slug `flowSlug`, or of the current target of the alias of that
   * name (the run records the alias: `startedAs`). Pass the flow's type
   * (`startFlow<typeof myFlow>("my_flow", ...)`) to type input and output; for an alias, the
   * union of its versions (`startFlow<typeof v1 | typeof v2>("thread_triage", ...)`, output: the
   * union of theirs) or the target's. Without it both are `Json`. A slug carries no schema: the
   * input is checked here when the client was given the flow (`flows`: through an alias, the
   * version it points at now), else by the worker before the run's steps run.
   */
  startFlow<F extends FlowCarrier = never>(
    flowSlug: string,
    input: FlowInputOf<F>,
    options?: StartFlowOptions,
  ): Promise<FlowRun<F>>;
  /**
   * Starts one run of `flow` per element of `inputs`, in one database call
   * (`pgflow.start_flows`): every run starts, or (on any refusal) none does. The handles come
   * back in the order of `inputs`. A flow with an input schema checks each input first: an
   * `InputValidationError` names the first failing one (`index`) and no run is made. Far
   * cheaper than as many `startFlow` calls (one statement per table, not one call per run); at
   * most 100,000 inputs a call. Runs have no `runId` of the caller's: for idempotent starts, use
   * `startFlow` with `runId`.
   */
  startFlows<F extends FlowCarrier>(
    flow: F,
    inputs: readonly FlowInputOf<F>[],
    options?: StartFlowsOptions,
  ): Promise<FlowRun<F>[]>;
  /**
   * Starts one run per element of `inputs` of the flow with slug `flowSlug`, or of the current
   * target of the alias of that name; typed and checked as `startFlow` by name.
   */
  startFlows<F extends FlowCarrier = never>(
    flowSlug: string,
    inputs: readonly FlowInputOf<F>[],
    options?: StartFlowsOptions,
  ): Promise<FlowRun<F>[]>;
  /**
   * A handle on an existing run (nothing is read until it is used). With `flowSlug`, every read
   * checks that the run is of that flow (the type `F` is only trusted so far) and rejects with
   * `RunFlowMismatchError` when it is not; without it, the run's flow is not checked.
   */
  run<F extends FlowCarrier = never>(runId: string, flowSlug?: string): FlowRun<F>;
  /**
   * The run with every step's status, output, error and attempt history; `null` when there is
   * no such run.
   */
  getRun<F extends FlowCarrier = never>(runId: string): Promise<RunState<F> | null>;
  /**
   * Runs matching `options`, newest first (`pgflow.list_runs`): summaries without input, output
   * or steps (read one with `getRun`). Rejects with `ClientConfigError` for a bad filter.
   */
  listRuns(options?: ListRunsOptions): Promise<RunSummary[]>;
  /**
   * Tasks waiting for capacity (flow control; `pgflow.waiting_tasks`), per queue and
   * `(scope, key)`: how many, since when, the key's tasks in flight, its limit and why they wait.
   * Only `queue`'s when given.
   */
  waitingTasks(queue?: string): Promise<QueueWaitingTasks[]>;
  /**
   * Sends the event `step` of `flow` waits for (`.waitForEvent()`), with `payload` typed as that
   * step's output and checked by its `payload` schema (`EventPayloadError`: nothing sent), to one
   * run (`{ runId }`) or to every run waiting with correlation key `{ key }`. An event that finds
   * no wait yet is kept (`keepSeconds`, default a day) and delivered when the step waits; the
   * first event of a wait wins. The result says, per wait, what happened (docs/waiting.md).
   */
  sendEvent<F extends FlowCarrier, S extends EventStepSlug<F>>(
    flow: F,
    step: S,
    payload: EventPayloadOf<F, S>,
    to: EventAddress,
  ): Promise<SendEventResult>;
  /** Sends event `event` by name (no schema check): to `{ runId, stepSlug? }` or `{ key }`. */
  sendEvent(event: string, payload: unknown, to: EventAddress): Promise<SendEventResult>;
  /**
   * Schedules of this database: a flow started on a cron expression or an interval, one run per
   * tick (docs/schedules.md). Rejects with `ScheduleError` when the database refuses.
   */
  readonly schedules: ScheduleClient;
  /** How the client hears about changes: `listen`, `realtime` or `poll` (decided on first use). */
  transport(): Promise<"listen" | "realtime" | "poll">;
  /**
   * Ends the client's own connections (not a pool or supabase client it was given). Every
   * pending `waitFor` rejects at once with `ClientClosedError`, every `events()` iteration ends
   * (without an error), and later calls reject with `ClientClosedError`.
   */
  close(): Promise<void>;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/**
 * Makes a client: start runs, wait for them, read them, watch their events.
 *
 * @example
 * ```ts
 * import { createClient, Flow } from "@pgflow/shared";
 *
 * const greet = new Flow<{ name: string }>({ slug: "greet" })
 *   .step({ slug: "hello" }, (input) => `hello ${input.name}`);
 *
 * const client = createClient({ connectionString: "postgres://postgres@127.0.0.1:5432/postgres" });
 * // const run = await client.startFlow(greet, { name: "Ada" });
 * // const output = await run.waitFor("completed", { timeoutMs: 30_000 }); // { hello: string }
 * // for await (const event of run.events()) console.log(event.type);
 * await client.close();
 * ```
 */
export function createClient(options: ClientOptions): PgflowClient {
  const { timing, queryTimeoutMs, connection, flows: known } = resolveClientOptions(options);
  const backend = makeBackend(connection, queryTimeoutMs);
  // Aborted by close(), before the connections end: every wait and watch stops at once.
  const closing = new AbortController();
  const closed = closing.signal;

  async function startFlow<F extends FlowCarrier>(
    flow: F | string,
    input: FlowInputOf<F>,
    startOptions?: StartFlowOptions,
  ): Promise<FlowRun<F>> {
    const flowSlug = slugOf(flow);
    const checked = checkStartOptions(startOptions);
    const runId = checked.runId ?? null;
    const priority = checkedPriority(flowSlug, checked.priority);
    if (runId !== null && (typeof runId !== "string" || !UUID.test(runId))) {
      throw new StartFlowError(
        flowSlug,
        `runId ${JSON.stringify(runId)} is not a UUID; pass one such as crypto.randomUUID()`,
      );
    }
    if (closed.aborted) throw new ClientClosedError("closed", `startFlow of ${flowSlug}`);
    // A flow given is its own schema; a name, the schema of the flow it names, if given.
    const schemaFlow = typeof flow === "string"
      ? await known.forStart(flowSlug, (alias) => backend.aliasTarget(alias))
      : unwrapFlow(flow);
    const value = await checkedInput(schemaFlow, flowSlug, input);
    let text: string | undefined;
    try {
      // What would be stored as something else, or refused by jsonb, fails here naming its path.
      text = jsonText(value, "input");
    } catch (error) {
      throw new StartFlowError(flowSlug, (error as Error).message, undefined, { cause: error });
    }
    if (text === undefined) {
      throw new StartFlowError(flowSlug, "input is undefined; pass a JSON value (null for none)");
    }
    let result;
    try {
      // The span active around this call (if any) becomes the run's trace: docs/telemetry.md.
      result = await backend.startFlow(flowSlug, text, runId, priority, activeTraceparent());
    } catch (error) {
      throw startError(error, flowSlug, "startFlow", runId, closed);
    }
    // Started through an alias, the run is its target's: the handle checks that flow.
    if ("runId" in result) {
      return runHandle<F>(backend, result.runId, result.flowSlug, timing, closed, known);
    }
    // The id is taken: the same run when it is a run of this flow, or was started through this
    // alias (an idempotent retry).
    const existing = await backend.getRun(runId!);
    if (existing !== null && existing.flowSlug !== flowSlug && existing.startedAs !== flowSlug) {
      throw new StartFlowError(
        flowSlug,
        `run ${runId} exists already and is a run of flow ${existing.flowSlug}; use another runId`,
        "23505",
      );
    }
    return runHandle<F>(backend, runId!, existing?.flowSlug ?? flowSlug, timing, closed, known);
  }

  async function startFlows<F extends FlowCarrier>(
    flow: F | string,
    inputs: readonly FlowInputOf<F>[],
    startOptions?: StartFlowsOptions,
  ): Promise<FlowRun<F>[]> {
    const flowSlug = slugOf(flow, "startFlows");
    const priority = checkedPriority(flowSlug, checkStartManyOptions(startOptions).priority);
    if (!Array.isArray(inputs)) {
      throw new StartFlowError(
        flowSlug,
        `inputs must be an array (one input per run), got ${typeof inputs}; ` +
          "pass e.g. [{ id: 1 }, { id: 2 }]",
      );
    }
    if (closed.aborted) throw new ClientClosedError("closed", `startFlows of ${flowSlug}`);
    const schemaFlow = typeof flow === "string"
      ? await known.forStart(flowSlug, (alias) => backend.aliasTarget(alias))
      : unwrapFlow(flow);
    const texts: string[] = [];
    for (const [index, input] of inputs.entries()) {
      let value;
      try {
        value = await checkedInput(schemaFlow, flowSlug, input);
      } catch (error) {
        if (error instanceof InputValidationError) {
          throw new InputValidationError(flowSlug, error.issues, index);
        }
        throw error;
      }
      let text: string | undefined;
      try {
        text = jsonText(value, `inputs[${index}]`);
      } catch (error) {
        throw new StartFlowError(flowSlug, (error as Error).message, undefined, { cause: error });
      }
      if (text === undefined) {
        throw new StartFlowError(
          flowSlug,
          `inputs[${index}] is undefined; pass a JSON value (null for none)`,
        );
      }
      texts.push(text);
    }
    if (texts.length === 0) return [];
    let result;
    try {
      result = await backend.startFlows(
        flowSlug,
        `[${texts.join(",")}]`,
        priority,
        activeTraceparent(),
      );
    } catch (error) {
      throw startError(error, flowSlug, "startFlows", null, closed);
    }
    return result.runIds.map((runId) =>
      runHandle<F>(backend, runId, result.flowSlug, timing, closed, known)
    );
  }

  async function sendEvent(
    target: FlowCarrier | string,
    a: unknown,
    b: unknown,
    c?: EventAddress,
  ): Promise<SendEventResult> {
    const byName = typeof target === "string";
    const to = (byName ? b : c) as EventAddress;
    checkAddress(to);
    const step = byName ? (to as { stepSlug?: string }).stepSlug ?? null : a as string;
    const prepared = await prepareEvent(
      byName ? target : unwrapFlow(target),
      step,
      byName ? a : b,
    );
    const action = `sendEvent ${prepared.event}`;
    if (closed.aborted) throw new ClientClosedError("closed", action);
    const doc = await backend.sendEvent({
      event: prepared.event,
      payload: prepared.payload,
      value: prepared.value,
      runId: (to as { runId?: string }).runId ?? null,
      stepSlug: prepared.stepSlug,
      key: (to as { key?: string }).key ?? null,
      keepSeconds: to.keepSeconds ?? 86400,
    });
    return toSendEventResult(doc);
  }

  return {
    startFlow: startFlow as PgflowClient["startFlow"],
    startFlows: startFlows as PgflowClient["startFlows"],
    sendEvent: sendEvent as PgflowClient["sendEvent"],
    run<F extends FlowCarrier>(runId: string, flowSlug = ""): FlowRun<F> {
      if (typeof runId !== "string" || !UUID.test(runId)) {
        throw new TypeError(`run: ${JSON.stringify(runId)} is not a run id (a UUID)`);
      }
      return runHandle<F>(backend, runId, flowSlug, timing, closed, known);
    },
    async getRun<F extends FlowCarrier>(runId: string): Promise<RunState<F> | null> {
      if (typeof runId !== "string" || !UUID.test(runId)) {
        throw new TypeError(`getRun: ${JSON.stringify(runId)} is not a run id (a UUID)`);
      }
      const action = `getRun of run ${runId}`;
      if (closed.aborted) throw new ClientClosedError("closed", action, runId);
      try {
        return await backend.getRun(runId) as unknown as RunState<F> | null;
      } catch (error) {
        if (closed.aborted) throw new ClientClosedError("closed", action, runId, { cause: error });
        throw error;
      }
    },
    async listRuns(options?: ListRunsOptions): Promise<RunSummary[]> {
      const flow = options?.flow;
      const filter = checkListRunsOptions(
        options,
        flow === undefined || flow === null ? null : slugOf(flow, "listRuns: flow"),
      );
      if (closed.aborted) throw new ClientClosedError("closed", "listRuns");
      try {
        return await backend.listRuns(filter);
      } catch (error) {
        if (closed.aborted) {
          throw new ClientClosedError("closed", "listRuns", null, { cause: error });
        }
        throw error;
      }
    },
    async waitingTasks(queue?: string): Promise<QueueWaitingTasks[]> {
      if (queue !== undefined && (typeof queue !== "string" || queue === "")) {
        throw new TypeError(
          `waitingTasks: ${JSON.stringify(queue)} is not a queue name; pass a queue's name, or ` +
            "nothing for every queue",
        );
      }
      if (closed.aborted) throw new ClientClosedError("closed", "waitingTasks");
      try {
        return await backend.waitingTasks(queue ?? null);
      } catch (error) {
        if (closed.aborted) {
          throw new ClientClosedError("closed", "waitingTasks", null, { cause: error });
        }
        throw error;
      }
    },
    schedules: scheduleClient(async (call, args) => {
      if (closed.aborted) throw new ClientClosedError("closed", `schedules: ${call}`);
      return await backend.callSchedule(call, args);
    }, (flow) => slugOf(flow, "schedules")),
    async transport() {
      return (await backend.wakeSource()).name;
    },
    close() {
      closing.abort();
      return backend.close();
    },
  };
}

/** A start's priority, checked as the database will (the default is 0). */
function checkedPriority(flowSlug: string, priority: number | undefined): number {
  const value = priority ?? 0;
  if (
    !Number.isInteger(value) || value < FLOW_CONTROL_BOUNDS.priority.min ||
    value > FLOW_CONTROL_BOUNDS.priority.max
  ) {
    throw new StartFlowError(
      flowSlug,
      `priority ${JSON.stringify(value)} must be an integer between ` +
        `${FLOW_CONTROL_BOUNDS.priority.min} and ${FLOW_CONTROL_BOUNDS.priority.max} ` +
        `(higher goes first); pass e.g. { priority: 10 }`,
    );
  }
  return value;
}

/** What a start that failed in the database (or on the way) rejects with. */
function startError(
  error: unknown,
  flowSlug: string,
  call: "startFlow" | "startFlows",
  runId: string | null,
  closed: AbortSignal,
): Error {
  if (closed.aborted) {
    return new ClientClosedError("closed", `${call} of ${flowSlug}`, runId, { cause: error });
  }
  if (error instanceof ClientClosedError) return error;
  if (error instanceof DatabaseConnectionError) {
    // What to check is all it needs to say: no stack, no cause to print.
    return withoutStack(new StartFlowError(flowSlug, error.message, error.code));
  }
  const e = error as { message?: string; code?: string; hint?: string };
  return new StartFlowError(
    flowSlug,
    `${e.message ?? String(error)}${e.hint ? ` (${e.hint})` : ""}`,
    e.code,
    { cause: error },
  );
}

function makeBackend(connection: ResolvedConnection, queryTimeoutMs: number): Backend {
  if (connection.kind === "supabase") {
    return supabaseBackend(connection.supabase, connection.transport);
  }
  if (connection.kind === "sql") {
    if (connection.url !== undefined) parseDatabaseUrl(connection.url, "createClient: url");
    return explainUnreachable(
      sqlBackend(connection.sql, {
        transport: connection.transport,
        queryTimeoutMs,
        url: connection.url,
        owned: false,
      }),
      connection.url,
    );
  }
  // Checked here to name the option; a bad URL throws a DatabaseUrlError, password masked.
  parseDatabaseUrl(connection.connectionString, "createClient: connectionString");
  const sql = createPool(connection.connectionString, { max: 4, ...connection.pool });
  return explainUnreachable(
    sqlBackend(sql, {
      transport: connection.transport,
      queryTimeoutMs,
      url: connection.connectionString,
      owned: true,
    }),
    connection.connectionString,
  );
}

function unwrapFlow(flow: FlowCarrier): AnyFlow {
  return "flow" in flow && flow.flow !== undefined ? flow.flow : flow as AnyFlow;
}

function slugOf(flow: FlowCarrier | string, where = "startFlow"): string {
  if (typeof flow === "string") return flow;
  if (flow !== null && typeof flow === "object") {
    if ("flow" in flow && flow.flow !== undefined) return flow.flow.slug;
    if ("slug" in flow && typeof flow.slug === "string") return flow.slug;
  }
  throw new TypeError(
    `${where}: ${String(flow)} is not a flow; pass a Flow, a routed or step-queued flow, or a slug`,
  );
}
