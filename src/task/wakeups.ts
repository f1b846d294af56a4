import {
  type ChannelEvent,
  ChannelListener,
  type ChannelSubscription,
} from "../platform/listen.ts";
import type { Sql } from "../platform/types.ts";
import { type ConnectionInfo, ownsServerSession } from "../platform/connection_kind.ts";
import type { Logger } from "../platform/logger.ts";
import { bounded } from "../platform/deadline.ts";
import type { SupportedPair } from "./claim.ts";
import { pairKey, pairKeys } from "../util/pair_key.ts";

/**
 * How a worker learns of new work: `listen`, `poll`, or `auto` (see `EdgeWorkerConfig.wakeups`).
 *
 * @example
 * ```ts
 * import type { WakeupMode } from "@pgflow/shared";
 *
 * const mode: WakeupMode = "auto";
 * ```
 */
export type WakeupMode = "auto" | "listen" | "poll";

/** A worker's wake-ups: the notifications its poll loop waits for, if any, and how to end them. */
export interface WorkerWakeups {
  /** `listen` when the worker listens, `poll` when it only polls. */
  readonly mode: "listen" | "poll";
  /** For the poll loop; absent when polling. */
  readonly wakeups?: QueueWakeups;
  /** Leaves the queue's group (and closes the LISTEN connection with its last user). */
  close(): Promise<void>;
}

/**
 * Opens a worker's wake-ups before its first read, so no notification is missed between that read
 * and the LISTEN. A LISTEN that fails or goes unanswered for `timeoutMs` (a pooler that refuses
 * it) is logged and the worker polls instead: wake-ups make pickup faster, never possible.
 * `auto` listens only where the connection (and its LISTEN) stays the worker's: not behind a
 * transaction pooler, nor a pooler of unknown mode.
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
  if (mode === "poll" || (mode === "auto" && !ownsServerSession(connection.kind))) return poll;
  const shared = ProcessListener.acquire(sql, timeoutMs);
  try {
    const wakeups = await bounded(
      QueueWakeups.open(shared, queue, supported, log),
      "LISTEN",
      timeoutMs,
    );
    return { mode: "listen", wakeups, close: () => wakeups.close() };
  } catch (error) {
    await shared.release().catch(() => {});
    log.warn("LISTEN failed; polling instead", { error: (error as Error).message });
    return poll;
  }
}

/**
 * The LISTEN connection of every worker of this process on one database as one user, and the
 * wake groups of the queues they poll: one connection however many workers and queues, and one
 * notification wakes one waiting worker of a queue rather than all (see {@link QueueWakeups}).
 * The process's only registry of them; the last user to leave closes the connection.
 */
class ProcessListener {
  static readonly #all = new Map<string, ProcessListener>();
  readonly listener: ChannelListener;
  /** The queue groups, by channel (a promise while the group's LISTEN is being made). */
  readonly groups = new Map<string, Promise<WakeGroup>>();
  #users = 0;

  private constructor(sql: Sql, readonly key: string, timeoutMs: number) {
    this.listener = new ChannelListener(sql, { applicationName: "pgflow worker", timeoutMs });
  }

  /**
   * The process's listener for `sql`'s database and user, with one more user. Its calls are
   * bounded by `timeoutMs` of the worker that opened it.
   */
  static acquire(sql: Sql, timeoutMs: number): ProcessListener {
    const o = (sql as unknown as { options: Record<string, unknown> }).options;
    const key = JSON.stringify([o.host, o.port, o.database, o.user]);
    let shared = ProcessListener.#all.get(key);
    if (shared === undefined) {
      ProcessListener.#all.set(key, shared = new ProcessListener(sql, key, timeoutMs));
    }
    shared.#users++;
    return shared;
  }

  /** One user fewer; the last one closes the connection. */
  async release(): Promise<void> {
    if (--this.#users > 0) return;
    ProcessListener.#all.delete(this.key);
    await this.listener.close();
  }
}

/**
 * The channel work for `queue` is announced on: `pgflow._send_task_messages` notifies it in the
 * sending transaction (supabase/schemas/0200_messages.sql). At most 13 + 47 characters, inside
 * Postgres's 63-byte limit for channel names.
 */
export function queueChannel(queue: string): string {
  return `pgflow_queue:${queue}`;
}

/**
 * Notifications that work was sent to one queue, for one worker's poll loop: while the channel is
 * listened to, the loop reads without waiting in the database and then waits here for the next
 * notification (or its fallback timer); while it is not (the connection was lost), the loop reads
 * on a short timer until it is back.
 *
 * A notification that arrives while a read is running is kept (`beforeRead` clears the mark, a
 * notification sets it, `wait` returns at once when it is set), so the loop never sleeps through
 * work sent just after its read looked.
 *
 * Workers of one process that listen to the same queue through the same listener are one group,
 * and a notification wakes one of them that is waiting, not all: the others would read nothing,
 * each read costing the database as much as a useful one (graphile-worker's "nudge"). One whose
 * read came back full calls `nudge` with the pairs it claimed, waking another that serves one of
 * them, so a burst larger than a batch still spreads over every idle worker that can take it (and
 * not over workers that would only read it and hand it back). With no member waiting, every member is marked, so none goes to sleep
 * over it. A lost or returned connection wakes every member.
 *
 * A notification whose payload names a pair (`["flow", "step"]`) is a message handed back, visible
 * again now, by a worker that read it and cannot claim it, or that had no free slot for it
 * (pgflow._start_tasks): it wakes one waiting member that serves the pair, or marks every member
 * that does, and never one that does not, which would only read it and hand it back again.
 */
export class QueueWakeups {
  readonly #shared: ProcessListener;
  readonly #group: WakeGroup;
  readonly #serves: ReadonlySet<string>;
  readonly #log: Logger | undefined;
  #pending = false;
  #waiter: (() => void) | undefined;

  private constructor(
    shared: ProcessListener,
    group: WakeGroup,
    supported: readonly SupportedPair[],
    log: Logger | undefined,
  ) {
    this.#shared = shared;
    this.#group = group;
    this.#serves = pairKeys(supported);
    this.#log = log;
  }

  /**
   * Joins `queue`'s group on the process's listener as a worker serving `supported`; rejects when
   * the LISTEN could not be made.
   */
  static async open(
    shared: ProcessListener,
    queue: string,
    supported: readonly SupportedPair[] = [],
    log?: Logger,
  ): Promise<QueueWakeups> {
    const group = await WakeGroup.of(shared, queueChannel(queue));
    const wakeups = new QueueWakeups(shared, group, supported, log);
    group.members.add(wakeups);
    return wakeups;
  }

  /** Whether this member's worker has a handler for the pair (a key of {@link pairKey}). */
  serves(key: string): boolean {
    return this.#serves.has(key);
  }

  /**
   * Whether a notification sent now would arrive (or would, once this worker waits: senders are
   * told when it does, see `wait`).
   */
  get listening(): boolean {
    return this.#shared.listener.listening(this.#group.channel) && !this.#group.refused;
  }

  /** Whether the loop is in `wait` now (a notification may be given to it). */
  get waiting(): boolean {
    return this.#waiter !== undefined;
  }

  /** Call right before a read: notifications from here on wake the next `wait`. */
  beforeRead(): void {
    this.#pending = false;
  }

  /**
   * Resolves on a notification since `beforeRead` (at once if one came already), when the
   * LISTEN connection is lost or back, after `ms`, or when `signal` aborts (also while senders
   * are being told that this worker waits: a stopping worker does not wait for that call).
   */
  wait(ms: number, signal: AbortSignal): Promise<void> {
    if (this.#pending || signal.aborted) return Promise.resolve();
    this.#group.notBusy();
    // Senders notify the queue only while some worker waits for it (0045_listeners.sql). Until
    // this group has said so, work sent since the last read was announced to no one: say so, then
    // return, so the loop reads again; it sleeps from its next wait on.
    const registering = this.#group.startWaiting();
    if (registering !== undefined) {
      return untilAborted(
        registering.then((error) => {
          if (error === undefined) return;
          // `listening` is false now: the loop reads again at once, then every pollIntervalMs
          // (the `ms` it passes from then on), trying again each time.
          if (error === REFUSED_AGAIN) return this.#sleep(ms, signal);
          this.#log?.warn("could not tell senders this worker waits; polling meanwhile", {
            error: (error as Error).message,
          });
        }),
        signal,
      );
    }
    return this.#sleep(ms, signal);
  }

  #sleep(ms: number, signal: AbortSignal): Promise<void> {
    if (this.#pending || signal.aborted) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal.removeEventListener("abort", done);
        this.#waiter = undefined;
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal.addEventListener("abort", done, { once: true });
      this.#waiter = done;
    });
  }

  /**
   * The last read came back full, claiming tasks of these pairs: there may be more, so wake
   * another waiting member that serves one of them.
   */
  nudge(pairs: readonly SupportedPair[]): void {
    this.#group.busy();
    const keys = pairs.map(([flow, step]) => pairKey(flow, step));
    this.#group.wakeOne(
      this,
      [...this.#group.members].filter((m) => keys.some((k) => m.serves(k))),
    );
  }

  /**
   * Leaves the group (the last member to leave ends the queue's LISTEN, and the listener's last
   * user closes its connection).
   */
  async close(): Promise<void> {
    this.#group.members.delete(this);
    // A notification given to this member is not lost with it.
    if (this.#pending) this.#group.wakeOne(this);
    this.#waiter?.();
    await this.#group.leave();
    await this.#shared.release();
  }

  /** Marks this member and ends its wait. */
  wake(): void {
    this.#pending = true;
    this.#waiter?.();
  }
}

/** A group's attempt to tell senders it waits failed again (see `WakeGroup.startWaiting`). */
const REFUSED_AGAIN: unique symbol = Symbol("refused again");

/**
 * How long a group's reads must come back full, with no member waiting, before senders are told
 * it no longer waits: long enough that a worker between two batches does not flap between the
 * two, short enough that a backlog's completions soon stop notifying.
 */
const BUSY_MS = 100;

/** The members of one channel on one listener; see {@link QueueWakeups}. */
class WakeGroup {
  readonly members = new Set<QueueWakeups>();
  #subscription: ChannelSubscription | undefined;
  #turn = 0;
  /**
   * Whether senders were told that this group waits (`true`), are being told (a promise of the
   * error, `undefined` when it worked), or not (`false`).
   */
  #waiting: boolean | Promise<unknown> = false;
  /** The last attempt to tell senders failed: the members poll until one works. */
  refused = false;
  /** Since when every read came back full with no member waiting (see `busy`). */
  #busySince: number | undefined;

  private constructor(
    readonly shared: ProcessListener,
    readonly channel: string,
  ) {}

  /** The group of `channel` on the process's listener, made (and listened to) by its first member. */
  static of(shared: ProcessListener, channel: string): Promise<WakeGroup> {
    const groups = shared.groups;
    let group = groups.get(channel);
    if (group === undefined) {
      const made = new WakeGroup(shared, channel);
      group = shared.listener.subscribe(channel, (event, payload) => made.#heard(event, payload))
        .then(
          (subscription) => {
            made.#subscription = subscription;
            return made;
          },
          (error) => {
            groups.delete(channel);
            throw error;
          },
        );
      groups.set(channel, group);
    }
    return group;
  }

  /** Wakes one waiting member other than `except` (of `among`, default all), if there is one. */
  wakeOne(except?: QueueWakeups, among: Iterable<QueueWakeups> = this.members): boolean {
    const waiting = [...among].filter((m) => m !== except && m.waiting);
    if (waiting.length === 0) return false;
    waiting[this.#turn++ % waiting.length].wake();
    return true;
  }

  /**
   * Work of pair `key` waits: wake one waiting member that serves it, else mark every member that
   * does (none sleeps over it). Members that do not serve it are left alone.
   */
  wakeServing(key: string, except?: QueueWakeups): void {
    const able = [...this.members].filter((m) => m !== except && m.serves(key));
    if (this.wakeOne(undefined, able)) return;
    for (const member of able) member.wake();
  }

  /**
   * Tells senders that this group waits for the queue, unless they know: a promise of the error,
   * `undefined` when it worked (every member waiting meanwhile gets the same), or `undefined`
   * when they know already.
   */
  startWaiting(): Promise<unknown> | undefined {
    if (this.#waiting === true) return undefined;
    if (this.#waiting !== false) return this.#waiting;
    const told = this.shared.listener.startWaiting(this.channel).then(
      () => {
        if (this.#waiting === told) this.#waiting = true;
        this.refused = false;
        return undefined;
      },
      (error: unknown) => {
        if (this.#waiting === told) this.#waiting = false;
        // Said once per run of refusals, not at every retry (one per pollIntervalMs).
        const again = this.refused;
        this.refused = true;
        return again ? REFUSED_AGAIN : error ?? new Error("unknown error");
      },
    );
    return this.#waiting = told;
  }

  /**
   * A member's read came back full. Once they have for `BUSY_MS` with no member waiting, tell
   * senders the group no longer waits: completions of a backlog then commit without a NOTIFY.
   */
  busy(): void {
    if (this.#waiting !== true || [...this.members].some((m) => m.waiting)) return;
    const now = Date.now();
    this.#busySince ??= now;
    if (now - this.#busySince < BUSY_MS) return;
    this.#busySince = undefined;
    this.#waiting = false;
    void this.shared.listener.stopWaiting(this.channel);
  }

  /** A member waits: the group is not busy (see `busy`). */
  notBusy(): void {
    this.#busySince = undefined;
  }

  /** Ends the LISTEN once no member is left. */
  async leave(): Promise<void> {
    if (this.members.size > 0) return;
    this.shared.groups.delete(this.channel);
    await this.#subscription?.close();
  }

  #heard(event: ChannelEvent, payload: string): void {
    const handedBack = event === "notify" ? handedBackPair(payload) : undefined;
    if (handedBack !== undefined) {
      this.wakeServing(handedBack);
      return;
    }
    if (event === "notify" && this.wakeOne()) return;
    for (const member of this.members) member.wake();
  }
}

/** `promise`, or nothing once `signal` aborts, whichever comes first. */
function untilAborted(promise: Promise<void>, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    const done = () => {
      signal.removeEventListener("abort", done);
      resolve();
    };
    signal.addEventListener("abort", done, { once: true });
    promise.then(done, (error) => {
      signal.removeEventListener("abort", done);
      reject(error);
    });
  });
}

/**
 * The pair a hand-back notification names (its payload is `["flow", "step"]`; see
 * pgflow._start_tasks), as a {@link pairKey}; `undefined` for any other payload (the plain "work
 * was sent" notification has none).
 */
function handedBackPair(payload: string): string | undefined {
  if (!payload.startsWith("[")) return undefined;
  try {
    const [flow, step] = JSON.parse(payload);
    if (typeof flow !== "string" || typeof step !== "string") return undefined;
    return pairKey(flow, step);
  } catch {
    return undefined;
  }
}
