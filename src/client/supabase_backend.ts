/**
 * The client over supabase-js: `rpc('start_flow')`, `rpc('get_run_text')`, and `cancel_run`,
 * `retry_run`, `resume_run`, `list_runs`, in the `pgflow` schema (which must be exposed by the
 * API), wake-ups by Supabase Realtime broadcast.
 *
 * @module
 */
import type { SupabaseClient } from "../platform/types.ts";
import type {
  Backend,
  RestartedRun,
  SendEventDocument,
  StartManyResult,
  StartResult,
  WakeSource,
} from "./backend.ts";
import { type RawWaiting, toRunState, toRunSummary, toWaiting } from "./snapshot.ts";
import { parseJson } from "../util/json_parse.ts";
import type { CancelResult, RunStatus } from "./types.ts";
import { realtimeSource } from "./transports/realtime.ts";
import { pollSource } from "./transports/poll.ts";

/** An error supabase-js returned, as an Error with the database's code. */
class RpcError extends Error {
  readonly code: string | undefined;
  constructor(what: string, error: { message: string; code?: string; hint?: string }) {
    super(`${what}: ${error.message}${error.hint ? ` (${error.hint})` : ""}`);
    this.name = "RpcError";
    this.code = error.code;
  }
}

/** A {@link Backend} on a supabase-js client. */
export function supabaseBackend(
  supabase: SupabaseClient,
  transport: "auto" | "realtime" | "poll",
): Backend {
  const pgflow = supabase.schema("pgflow");
  const source: WakeSource = transport === "poll" ? pollSource() : realtimeSource(supabase);
  return {
    async startFlow(flowSlug, input, runId, priority, traceparent): Promise<StartResult> {
      const { data, error } = await pgflow.rpc("start_flow", {
        flow_slug: flowSlug,
        // parseJson, not JSON.parse: keys as given, numbers exact (supabase-js writes them back
        // with JSON.stringify, so PostgREST receives the text the client made).
        input: parseJson(input),
        run_id: runId,
        // Only when set: a run at the default priority and outside a trace calls start_flow as
        // before either existed.
        ...(priority ? { priority } : {}),
        ...(traceparent ? { traceparent } : {}),
      });
      if (error) {
        if (error.code === "23505" && runId !== null) return { exists: true };
        throw new RpcError("start_flow", error);
      }
      const run = data as { run_id: string; flow_slug: string };
      return { runId: run.run_id, flowSlug: run.flow_slug };
    },
    async startFlows(flowSlug, inputs, priority, traceparent): Promise<StartManyResult> {
      const { data, error } = await pgflow.rpc("start_flows", {
        flow_slug: flowSlug,
        inputs: parseJson(inputs), // exact, as start_flow's input
        ...(priority ? { priority } : {}),
        ...(traceparent ? { traceparent } : {}),
      });
      if (error) throw new RpcError("start_flows", error);
      // A function with out parameters answers with its one row (as an array from some versions).
      const row = (Array.isArray(data) ? data[0] : data) as {
        run_ids: string[];
        run_flow_slug: string;
      };
      return { runIds: row.run_ids, flowSlug: row.run_flow_slug };
    },
    async getRun(runId) {
      // get_run_text: the document as one JSON string, which supabase-js's JSON.parse reads
      // exactly (a string has no keys for V8's key cache to get wrong, no numbers to round);
      // toRunState then reads the document with parseJson.
      const { data, error } = await pgflow.rpc("get_run_text", { run_id: runId });
      if (error) throw new RpcError("get_run_text", error);
      return toRunState(data);
    },
    async sendEvent(call): Promise<SendEventDocument> {
      const { data, error } = await pgflow.rpc("send_event", {
        event_name: call.event,
        payload: call.value ?? null,
        run_id: call.runId,
        step_slug: call.stepSlug,
        key: call.key,
        keep: `${call.keepSeconds} seconds`,
      });
      if (error) throw new RpcError("send_event", error);
      return data as SendEventDocument;
    },
    async cancelRun(runId, reason): Promise<CancelResult> {
      const { data, error } = await pgflow.rpc("cancel_run", { run_id: runId, reason });
      if (error) throw new RpcError("cancel_run", error);
      // A function returning a table answers with an array of its rows.
      const row = (Array.isArray(data) ? data[0] : data) as {
        run_id: string;
        flow_slug: string;
        status: RunStatus;
        cancelled: boolean;
      };
      return {
        runId: row.run_id,
        flowSlug: row.flow_slug,
        status: row.status,
        cancelled: row.cancelled,
      };
    },
    async restartRun(runId, mode, again, input): Promise<RestartedRun> {
      const fn = mode === "retry" ? "retry_run" : "resume_run";
      const { data, error } = await pgflow.rpc(
        fn,
        input === null
          ? { run_id: runId, again }
          : { run_id: runId, again, input: parseJson(input) }, // exact, as start_flow's
      );
      if (error) throw new RpcError(fn, error);
      const row = (Array.isArray(data) ? data[0] : data) as { run_id: string; flow_slug: string };
      return { runId: row.run_id, flowSlug: row.flow_slug };
    },
    async aliasTarget(alias) {
      const { data, error } = await pgflow.rpc("list_aliases");
      if (error) throw new RpcError("list_aliases", error);
      const found = ((data ?? []) as { alias: string; flow_slug: string }[])
        .find((a) => a.alias === alias);
      return found?.flow_slug ?? null;
    },
    async callSchedule(call, args) {
      const body = Object.fromEntries(
        Object.entries(args).map(([name, { type, value }]) => [
          name,
          // parseJson: the input exactly as the client wrote it (see start_flow above).
          type === "jsonb" && typeof value === "string" ? parseJson(value) : value,
        ]),
      );
      const { data, error } = await pgflow.rpc(call, body);
      if (error) throw new RpcError(call, error);
      return data;
    },
    async listRuns(filter) {
      const { data, error } = await pgflow.rpc("list_runs", {
        flow_slug: filter.flowSlug,
        status: filter.status,
        since: filter.since,
        run_id_prefix: filter.runIdPrefix,
        max_rows: filter.limit,
        restarted: filter.restarted,
      });
      if (error) throw new RpcError("list_runs", error);
      return ((data ?? []) as unknown[]).map(toRunSummary);
    },
    async waitingTasks(queue) {
      const { data, error } = await pgflow.rpc("waiting_tasks", { queue_name: queue });
      if (error) throw new RpcError("waiting_tasks", error);
      return ((data ?? []) as WaitingRow[]).map((r) => ({
        queueName: r.queue_name,
        ...toWaiting({ ...r, tasks: r.waiting, since: utcMicros(r.oldest_queued_at) }),
      }));
    },
    wakeSource: () => Promise.resolve(source),
    close: () => source.close(),
  };
}

/** A row of `pgflow.waiting_tasks` as PostgREST sends it. */
type WaitingRow = Omit<RawWaiting, "tasks" | "since"> & {
  queue_name: string;
  waiting: number;
  oldest_queued_at: string;
};

/**
 * A `timestamptz` as PostgREST sends it (Postgres's JSON text: `2026-12-06T19:33:39.86752+00:00`,
 * trailing zeros of the fraction dropped, none at all on a whole second) as the UTC text with
 * exactly six fractional digits that the SQL backend's `to_char` gives, so both backends agree to
 * the microsecond.
 *
 * @example
 * ```ts
 * utcMicros("2026-12-06T19:33:39.86752+00:00"); // "2026-12-06T19:33:39.867520Z"
 * utcMicros("2026-12-06T20:33:39+01:00"); // "2026-12-06T19:33:39.000000Z"
 * ```
 */
export function utcMicros(value: string): string {
  const m = /^(\d{4}-\d\d-\d\d)[T ](\d\d:\d\d:\d\d)(?:\.(\d{1,6}))?(Z|[+-]\d\d(?::?\d\d)?)$/
    .exec(value);
  if (m === null) {
    throw new Error(`not a timestamp as PostgREST sends one: ${JSON.stringify(value)}`);
  }
  const zone = m[4] === "Z"
    ? "Z"
    : m[4].length === 3
    ? `${m[4]}:00`
    : `${m[4].slice(0, 3)}:${m[4].slice(-2)}`;
  const seconds = new Date(`${m[1]}T${m[2]}${zone}`).toISOString().slice(0, 19);
  return `${seconds}.${(m[3] ?? "").padEnd(6, "0")}Z`;
}
