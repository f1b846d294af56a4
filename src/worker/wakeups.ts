import type { Sql } from "../platform/types.ts";
import type { ConnectionInfo } from "../platform/connection_kind.ts";
import type { Logger } from "../platform/logger.ts";
import { ChannelListener } from "../platform/listen.ts";
import { QueueWakeups } from "../claim/wakeups.ts";
import type { WakeupMode } from "./config.ts";

/** A worker's wake-ups: the notifications its poll loop waits for, if any, and how to end them. */
export interface WorkerWakeups {
  /** `listen` when the worker listens, `poll` when it only polls. */
  readonly mode: "listen" | "poll";
  /** For the poll loop; absent when polling. */
  readonly wakeups?: QueueWakeups;
  /** Closes the LISTEN connection (nothing when polling). */
  close(): Promise<void>;
}

/**
 * Whether `auto` listens: on a direct connection or a session pooler, where the connection (and
 * its LISTEN) stays the worker's; not behind a transaction pooler, which gives the server
 * connection to another client after every transaction, nor behind a pooler of unknown mode.
 */
export function listensOn(kind: ConnectionInfo["kind"]): boolean {
  return kind === "direct" || kind === "session pooler";
}

/**
 * Opens the worker's wake-ups before its first read, so no notification is missed between that
 * read and the LISTEN. A LISTEN that fails (a pooler that refuses it) is logged and the worker
 * polls instead: wake-ups make pickup faster, never possible.
 */
export async function openWakeups(
  sql: Sql,
  queue: string,
  mode: WakeupMode,
  connection: ConnectionInfo,
  log: Logger,
): Promise<WorkerWakeups> {
  const poll: WorkerWakeups = { mode: "poll", close: () => Promise.resolve() };
  if (mode === "poll" || (mode === "auto" && !listensOn(connection.kind))) return poll;
  const listener = new ChannelListener(sql, { applicationName: `pgflow worker ${queue}` });
  try {
    const wakeups = await QueueWakeups.open(listener, queue);
    return {
      mode: "listen",
      wakeups,
      close: async () => {
        await wakeups.close();
        await listener.close();
      },
    };
  } catch (error) {
    await listener.close().catch(() => {});
    log.warn("LISTEN failed; polling instead", { error: (error as Error).message });
    return poll;
  }
}
