import type { SupabaseClient } from "../../platform/types.ts";
import type { Subscription, WakeSource } from "../backend.ts";
import { runChannel } from "./listen.ts";

/** The broadcast event `pgflow._notify_runs` sends with `realtime.send`. */
export const REALTIME_EVENT = "run_changed";

/**
 * Supabase Realtime broadcast: one private channel per run (`pgflow_run:<run id>`, the topic
 * `realtime.send` is called with). A private channel is authorized by RLS on
 * `realtime.messages`; the service key passes it, other roles need a policy (docs/client.md).
 * Realtime re-joins a channel by itself after a lost connection; each re-join wakes the watcher,
 * since broadcasts sent meanwhile are not replayed.
 */
export function realtimeSource(supabase: SupabaseClient): WakeSource {
  return {
    name: "realtime",
    pushes: true,
    subscribe(runId: string, wake: () => void): Promise<Subscription> {
      const channel = supabase.channel(runChannel(runId), { config: { private: true } });
      const close = async () => {
        await supabase.removeChannel(channel);
      };
      return new Promise<Subscription>((resolve, reject) => {
        let joined = false;
        channel
          .on("broadcast", { event: REALTIME_EVENT }, () => wake())
          .subscribe((status, error) => {
            if (status === "SUBSCRIBED") {
              if (joined) wake();
              else {
                joined = true;
                resolve({ close });
              }
            } else if (!joined && (status === "CHANNEL_ERROR" || status === "TIMED_OUT")) {
              joined = true; // settled: a later join is not waited for
              void close();
              reject(
                new Error(
                  `Supabase Realtime channel ${runChannel(runId)}: ${status}` +
                    (error ? `: ${error.message}` : ""),
                ),
              );
            }
          });
      });
    },
    close: () => Promise.resolve(),
  };
}
