import type { ChannelListener, ChannelSubscription } from "../platform/listen.ts";

/**
 * The channel work for `queue` is announced on: `pgflow._send_task_messages` notifies it in the
 * sending transaction (supabase/schemas/0200_messages.sql). At most 13 + 47 characters, inside
 * Postgres's 63-byte limit for channel names.
 */
export function queueChannel(queue: string): string {
  return `pgflow_queue:${queue}`;
}

/**
 * Notifications that work was sent to one queue, for the poll loop: while the channel is listened
 * to, the loop reads without waiting in the database and then waits here for the next notification
 * (or its fallback timer); while it is not (the connection was lost), the loop polls in the
 * database as without wake-ups.
 *
 * A notification that arrives while a read is running is kept (`beforeRead` clears the mark, a
 * notification sets it, `wait` returns at once when it is set), so the loop never sleeps through
 * work sent just after its read looked.
 */
export class QueueWakeups {
  readonly #listener: ChannelListener;
  readonly #channel: string;
  #subscription: ChannelSubscription | undefined;
  #pending = false;
  #waiter: (() => void) | undefined;

  private constructor(listener: ChannelListener, queue: string) {
    this.#listener = listener;
    this.#channel = queueChannel(queue);
  }

  /** Listens to `queue`'s channel; rejects when the LISTEN could not be made. */
  static async open(listener: ChannelListener, queue: string): Promise<QueueWakeups> {
    const wakeups = new QueueWakeups(listener, queue);
    wakeups.#subscription = await listener.subscribe(wakeups.#channel, () => wakeups.#wake());
    return wakeups;
  }

  /** Whether a notification sent now would arrive. */
  get listening(): boolean {
    return this.#listener.listening(this.#channel);
  }

  /** Call right before a read: notifications from here on wake the next `wait`. */
  beforeRead(): void {
    this.#pending = false;
  }

  /**
   * Resolves on a notification since `beforeRead` (at once if one came already), when the
   * LISTEN connection is lost or back, after `ms`, or when `signal` aborts.
   */
  wait(ms: number, signal: AbortSignal): Promise<void> {
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

  /** Stops listening (the listener itself is closed by its owner). */
  async close(): Promise<void> {
    await this.#subscription?.close();
    this.#waiter?.();
  }

  #wake(): void {
    this.#pending = true;
    this.#waiter?.();
  }
}
