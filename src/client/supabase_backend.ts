/**
 * The client over supabase-js: `rpc('start_flow')` and `rpc('get_run')` in the `pgflow` schema
 * (which must be exposed by the API), wake-ups by Supabase Realtime broadcast.
 *
 * @module
 */
import type { SupabaseClient } from "../platform/types.ts";
import type { Backend, StartResult, WakeSource } from "./backend.ts";
import { toRunState } from "./snapshot.ts";
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
    async startFlow(flowSlug, input, runId): Promise<StartResult> {
      const { data, error } = await pgflow.rpc("start_flow", {
        flow_slug: flowSlug,
        input: JSON.parse(input),
        run_id: runId,
      });
      if (error) {
        if (error.code === "23505" && runId !== null) return { exists: true };
        throw new RpcError("start_flow", error);
      }
      return { runId: (data as { run_id: string }).run_id };
    },
    async getRun(runId) {
      const { data, error } = await pgflow.rpc("get_run", { run_id: runId });
      if (error) throw new RpcError("get_run", error);
      return toRunState(data);
    },
    wakeSource: () => Promise.resolve(source),
    close: () => source.close(),
  };
}
