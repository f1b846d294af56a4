import type { Sql } from "../../platform/types.ts";
import { ChannelListener } from "../../platform/listen.ts";
import type { Subscription, WakeSource } from "../backend.ts";

/** The channel a run's notifications are sent on (see supabase/schemas/0850_run_events.sql). */
export function runChannel(runId: string): string {
  return `pgflow_run:${runId}`;
}

/**
 * LISTEN on a connection of its own (see `ChannelListener`), for direct and session-pooler
 * connections. A subscriber is woken by its run's notifications and whenever the connection is
 * lost or back, since what happened meanwhile was not announced: the watcher reads the run again.
 */
export function listenSource(sql: Sql): WakeSource {
  const listener = new ChannelListener(sql, { applicationName: "pgflow client" });
  return {
    name: "listen",
    pushes: true,
    subscribe: (runId: string, wake: () => void): Promise<Subscription> =>
      listener.subscribe(runChannel(runId), wake, { waiting: true }),
    close: () => listener.close(),
  };
}
