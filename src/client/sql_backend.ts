/**
 * The client over postgres.js: `start_flow` and `get_run` as queries, wake-ups by LISTEN on a
 * direct or session connection and by polling behind a transaction pooler.
 *
 * @module
 */
import { bounded } from "../platform/deadline.ts";
import { describeConnection, ownsServerSession } from "../platform/connection_kind.ts";
import type { Sql } from "../platform/types.ts";
import {
  type Backend,
  POOL_ENDED,
  type RestartedRun,
  type StartManyResult,
  type StartResult,
  type WakeSource,
} from "./backend.ts";
import { schemaVersionProblem } from "../operations/schema_version.ts";
import { ClientClosedError } from "./errors.ts";
import { type RawWaiting, toRunState, toRunSummary, toWaiting } from "./snapshot.ts";
import { parseJsonb } from "../util/json_parse.ts";
import type { CancelResult, RunStatus } from "./types.ts";
import type { SendEventDocument } from "./backend.ts";
import { listenSource } from "./transports/listen.ts";
import { pollSource } from "./transports/poll.ts";

/** How the client hears about changes: decided from the connection, or forced. */
export type TransportChoice = "auto" | "listen" | "poll";

/** Options of {@link sqlBackend}. */
export interface SqlBackendOptions {
  readonly transport: TransportChoice;
  readonly queryTimeoutMs: number;
  /** The pool's URL, when known (tells a session pooler from a transaction pooler). */
  readonly url?: string;
  /** Whether the client opened the pool and so ends it. */
  readonly owned: boolean;
}

/** A {@link Backend} on a postgres.js pool. */
export function sqlBackend(sql: Sql, options: SqlBackendOptions): Backend {
  let source: Promise<WakeSource> | undefined;
  const choose = async (): Promise<WakeSource> => {
    if (options.transport === "listen") return listenSource(sql);
    if (options.transport === "poll") return pollSource();
    // LISTEN needs a connection of its own that lasts: a direct one or a session pooler's. A
    // transaction pooler (or a pooler whose mode cannot be told) would deliver nothing.
    const info = await describeConnection(sql, options.url, options.queryTimeoutMs);
    return ownsServerSession(info.kind) ? listenSource(sql) : pollSource();
  };
  return {
    async startFlow(flowSlug, input, runId, priority, traceparent): Promise<StartResult> {
      try {
        const [row] = await bounded(
          sql<{ run_id: string; flow_slug: string }[]>`
            select run_id, flow_slug
            from pgflow.start_flow(${flowSlug}, ${input}::text::jsonb, ${runId}::uuid,
                                   ${priority}::integer, ${traceparent}::text)`,
          "start_flow",
          options.queryTimeoutMs,
        );
        return { runId: row.run_id, flowSlug: row.flow_slug };
      } catch (error) {
        if ((error as { code?: string }).code === "23505" && runId !== null) {
          return { exists: true };
        }
        throw poolEnded(error, `startFlow of ${flowSlug}`, null);
      }
    },
    async startFlows(flowSlug, inputs, priority, traceparent): Promise<StartManyResult> {
      try {
        const [row] = await bounded(
          // The ids as one text: exact, and read the same whatever the pool's type parsers.
          sql<{ run_ids: string; run_flow_slug: string }[]>`
            select array_to_string(run_ids, ',') as run_ids, run_flow_slug
            from pgflow.start_flows(${flowSlug}, ${inputs}::text::jsonb, ${priority}::integer,
                                    ${traceparent}::text)`,
          "start_flows",
          options.queryTimeoutMs,
        );
        return {
          runIds: row.run_ids === "" ? [] : row.run_ids.split(","),
          flowSlug: row.run_flow_slug,
        };
      } catch (error) {
        throw poolEnded(error, `startFlows of ${flowSlug}`, null);
      }
    },
    async getRun(runId) {
      let row;
      try {
        [row] = await bounded(
          // As text: read by parseJson (see toRunState), whatever the pool's JSON parser.
          sql<{ run: string | null }[]>`select pgflow.get_run(${runId}::uuid)::text as run`,
          "get_run",
          options.queryTimeoutMs,
        );
      } catch (error) {
        throw poolEnded(error, `reading run ${runId}`, runId);
      }
      return toRunState(row?.run ?? null);
    },
    async sendEvent(call): Promise<SendEventDocument> {
      try {
        const [row] = await bounded(
          sql<{ r: SendEventDocument }[]>`
            select pgflow.send_event(${call.event}, ${call.payload}::text::jsonb,
              run_id => ${call.runId}::uuid, step_slug => ${call.stepSlug}::text,
              key => ${call.key}::text, keep => make_interval(secs => ${call.keepSeconds})) as r`,
          "send_event",
          options.queryTimeoutMs,
        );
        return row.r;
      } catch (error) {
        throw poolEnded(error, `sending event ${call.event}`, call.runId);
      }
    },
    async cancelRun(runId, reason): Promise<CancelResult> {
      try {
        const [row] = await bounded(
          sql<{ run_id: string; flow_slug: string; status: RunStatus; cancelled: boolean }[]>`
            select run_id, flow_slug, status, cancelled
            from pgflow.cancel_run(${runId}::uuid, ${reason}::text)`,
          "cancel_run",
          options.queryTimeoutMs,
        );
        return {
          runId: row.run_id,
          flowSlug: row.flow_slug,
          status: row.status,
          cancelled: row.cancelled,
        };
      } catch (error) {
        throw poolEnded(error, `cancelling run ${runId}`, runId);
      }
    },
    async restartRun(runId, mode, again, input): Promise<RestartedRun> {
      try {
        const [row] = await bounded(
          mode === "retry"
            ? sql<{ run_id: string; flow_slug: string }[]>`
              select run_id, flow_slug
              from pgflow.retry_run(${runId}::uuid, ${again}::boolean, ${input}::text::jsonb)`
            : sql<{ run_id: string; flow_slug: string }[]>`
              select run_id, flow_slug from pgflow.resume_run(${runId}::uuid, ${again}::boolean)`,
          `${mode}_run`,
          options.queryTimeoutMs,
        );
        return { runId: row.run_id, flowSlug: row.flow_slug };
      } catch (error) {
        throw poolEnded(error, `${mode === "retry" ? "retrying" : "resuming"} run ${runId}`, runId);
      }
    },
    async aliasTarget(alias) {
      const rows = await bounded(
        sql<{ flow_slug: string }[]>`
          select a.flow_slug from pgflow.aliases a where a.alias = ${alias}`,
        "alias lookup",
        options.queryTimeoutMs,
      ).catch((error) => {
        throw poolEnded(error, `reading alias ${alias}`, null);
      });
      return rows[0]?.flow_slug ?? null;
    },
    async callSchedule(call, args) {
      // Names come from fixed unions (the call) and the client's own keys (the arguments); the
      // values travel as parameters.
      const names = Object.keys(args);
      // jsonb travels as text: a string parameter typed jsonb would be written as a JSON string.
      const cast = (type: string) => type === "jsonb" ? "text::jsonb" : type;
      const list = names.map((name, i) => `${name} => $${i + 1}::${cast(args[name].type)}`)
        .join(", ");
      const [row] = await bounded(
        sql.unsafe<{ j: string }[]>(
          `select coalesce(jsonb_agg(to_jsonb(r)), '[]'::jsonb)::text as j from pgflow.${call}(${list}) r`,
          names.map((name) => args[name].value),
        ),
        call,
        options.queryTimeoutMs,
      );
      const rows = parseJsonb(row.j) as unknown[];
      return call === "list_schedules" ? rows : rows[0];
    },
    async listRuns(filter) {
      try {
        const rows = await bounded(
          sql<{ run: string }[]>`
            select pgflow.list_runs(
              flow_slug => ${filter.flowSlug}::text, status => ${filter.status}::text,
              since => ${filter.since}::timestamptz, run_id_prefix => ${filter.runIdPrefix}::text,
              max_rows => ${filter.limit}::int, restarted => ${filter.restarted}::boolean)::text as run`,
          "list_runs",
          options.queryTimeoutMs,
        );
        return rows.map((r) => toRunSummary(r.run));
      } catch (error) {
        throw poolEnded(error, "listing runs", null);
      }
    },
    async waitingTasks(queue) {
      try {
        const rows = await bounded(
          sql<(RawWaiting & { queue_name: string })[]>`
            select w.queue_name, w.limit_scope, w.limit_key, w.waiting::int as tasks,
                   to_char(w.oldest_queued_at at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')
                     as since,
                   w.in_flight::int, w.max_running, w.reason
            from pgflow.waiting_tasks(${queue}::text) w`,
          "waiting_tasks",
          options.queryTimeoutMs,
        );
        return rows.map((r) => ({ queueName: r.queue_name, ...toWaiting(r) }));
      } catch (error) {
        throw poolEnded(error, "listing waiting tasks", null);
      }
    },
    wakeSource() {
      // Not kept when it failed (the database was unreachable): the next watcher asks again.
      source ??= choose().catch((error) => {
        source = undefined;
        throw error;
      });
      return source;
    },
    async close() {
      if (source !== undefined) await (await source.catch(() => pollSource())).close();
      if (options.owned) await sql.end({ timeout: 5 });
    },
  };
}

/** A query on an ended pool as the client's error saying so; any other error as it is. */
function poolEnded(error: unknown, action: string, runId: string | null): unknown {
  const code = (error as { code?: unknown } | null)?.code;
  if (code === POOL_ENDED) {
    return new ClientClosedError("pool_ended", action, runId, { cause: error });
  }
  if (engineMissing(error)) {
    return new Error(`${action}: ${schemaVersionProblem({ kind: "missing" })}`, { cause: error });
  }
  return error;
}

/**
 * The database has no engine: no pgflow schema (3F000), or no pgflow function of that name
 * (42883, a schema created by hand or half removed). Postgres's own words ("schema "pgflow" does
 * not exist") do not say what to do.
 */
function engineMissing(error: unknown): boolean {
  const e = error as { code?: unknown; message?: unknown } | null;
  return (e?.code === "3F000" || e?.code === "42883") &&
    /\bpgflow\b/.test(String(e?.message ?? ""));
}
