import type { Sql } from "../platform/types.ts";
import { type ConnectionInfo, ownsServerSession } from "../platform/connection_kind.ts";
import type { Logger } from "../platform/logger.ts";
import { ChannelListener } from "../platform/listen.ts";
import { bounded } from "../platform/deadline.ts";
import type { SupportedPair } from "../claim/claim.ts";
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
 * Opens the worker's wake-ups before its first read, so no notification is missed between that
 * read and the LISTEN. A LISTEN that fails or goes unanswered for `timeoutMs` (a pooler that
 * refuses it) is logged and the worker polls instead: wake-ups make pickup faster, never possible.
 */
export async function openWakeups(
  sql: Sql,
  queue: string,
  supported: readonly SupportedPair[],
  mode: WakeupMode,
  connection: ConnectionInfo,
  log: Logger,
  timeoutMs: number,
): Promise<WorkerWakeups> {
  const poll: WorkerWakeups = { mode: "poll", close: () => Promise.resolve() };
  // `auto` listens only where the connection (and its LISTEN) stays the worker's: not behind a
  // transaction pooler, nor a pooler of unknown mode.
  if (mode === "poll" || (mode === "auto" && !ownsServerSession(connection.kind))) return poll;
  const shared = acquireListener(sql);
  try {
    const wakeups = await bounded(
      QueueWakeups.open(shared.listener, queue, supported),
      "LISTEN",
      timeoutMs,
    );
    return {
      mode: "listen",
      wakeups,
      close: async () => {
        await wakeups.close();
        await shared.release();
      },
    };
  } catch (error) {
    await shared.release().catch(() => {});
    log.warn("LISTEN failed; polling instead", { error: (error as Error).message });
    return poll;
  }
}

interface SharedListener {
  readonly listener: ChannelListener;
  users: number;
}

/** The process's listeners, one per database and user (see acquireListener). */
const listeners = new Map<string, SharedListener>();

/**
 * The LISTEN connection of every worker of this process on the same database as the same user:
 * one connection, however many workers (and queues), and one notification wakes one waiting
 * worker of a queue rather than all (see QueueWakeups). Released by its last user.
 */
function acquireListener(sql: Sql): { listener: ChannelListener; release(): Promise<void> } {
  const o = (sql as unknown as { options: Record<string, unknown> }).options;
  const key = JSON.stringify([o.host, o.port, o.database, o.user]);
  let shared = listeners.get(key);
  if (shared === undefined) {
    shared = { listener: new ChannelListener(sql, { applicationName: "pgflow worker" }), users: 0 };
    listeners.set(key, shared);
  }
  shared.users++;
  const held = shared;
  let released = false;
  return {
    listener: held.listener,
    release: async () => {
      if (released) return;
      released = true;
      if (--held.users > 0) return;
      listeners.delete(key);
      await held.listener.close();
    },
  };
}
