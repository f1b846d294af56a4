import postgres from "npm:postgres@3.4.7";
import type { Sql } from "./types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "./deadline.ts";
import { sleep } from "../util/backoff.ts";

/**
 * Why a subscriber is called: a notification on its channel, or the connection `lost` (nothing is
 * heard until it is `back`) or `back` (what was sent meanwhile was announced to no one).
 */
export type ChannelEvent = "notify" | "lost" | "back";

/** A subscriber of a {@link ChannelListener}: why it is called, and the notification's payload. */
export type ChannelWake = (event: ChannelEvent, payload: string) => void;

/** One channel subscription of a {@link ChannelListener}; `close` ends it. */
export interface ChannelSubscription {
  close(): Promise<void>;
}

/** How a channel is subscribed to. */
export interface SubscribeOptions {
  /**
   * Also tell senders that this session waits for the channel ({@link ChannelListener.startWaiting}):
   * pgflow notifies a channel only while someone does. Default false (LISTEN only).
   */
  readonly waiting?: boolean;
}

/** What a {@link ChannelListener} connection is opened with, besides the pool's own options. */
export interface ChannelListenerOptions {
  /** `application_name` of the LISTEN connection, so operators can tell it in pg_stat_activity. */
  readonly applicationName?: string;
  /**
   * Milliseconds each call on the LISTEN connection may go unanswered before it is abandoned and
   * the connection replaced (see `bounded`); default {@link DEFAULT_QUERY_TIMEOUT_MS}.
   */
  readonly timeoutMs?: number;
}

/**
 * LISTEN on a connection of its own, opened with the options of a pool (so the same host,
 * credentials, TLS and socket), for direct and session-pooler connections: a transaction pooler
 * hands the session to someone else after every transaction, and the LISTEN with it.
 *
 * The connection is the listener's own rather than postgres.js's `sql.listen`: when the connection
 * is lost (a Postgres restart, a terminated backend), postgres.js tries to LISTEN again once and
 * gives up for good if the server is still down. Here every channel is listened to again, with
 * backoff, until it works. Every subscriber is woken both when the connection is lost (so one
 * waiting for a notification can fall back to reading on its own) and when it is back (what
 * happened in the meantime was not announced).
 *
 * Every call on the connection has a bound (`timeoutMs`): a connection that stops answering
 * without closing (replies lost by a pooler or a proxy, a partition) would otherwise hold its
 * callers for ever, and with them a worker's poll loop and its `stop()`. A call past its bound
 * destroys the connection, which counts as lost: the next call, or the healing, opens another.
 */
export class ChannelListener {
  readonly #options: Record<string, unknown>;
  readonly #applicationName: string | undefined;
  readonly #timeoutMs: number;
  #conn: Sql | undefined;
  readonly #channels = new Map<string, Set<ChannelWake>>();
  /** Channels the current connection listens on. */
  readonly #listened = new Set<string>();
  /** Channels senders were told this session waits for (pgflow.listen_start). */
  readonly #waitingFor = new Set<string>();
  /** Barriers to try again, by channel (see `startWaiting`). */
  readonly #barrierRetries = new Map<string, ReturnType<typeof setTimeout>>();
  #healing = false;
  #closed = false;
  /** Aborted by `close`: ends the healing's wait between attempts. */
  readonly #closing = new AbortController();

  /** A listener that opens its connection, on first use, from `sql`'s options. */
  constructor(sql: Sql, options: ChannelListenerOptions = {}) {
    this.#options = (sql as unknown as { options: Record<string, unknown> }).options;
    this.#applicationName = options.applicationName;
    this.#timeoutMs = options.timeoutMs ?? DEFAULT_QUERY_TIMEOUT_MS;
  }

  /** Whether `channel` is listened to right now (a notification sent now will arrive). */
  listening(channel: string): boolean {
    return this.#listened.has(channel);
  }

  /**
   * Calls `wake` on every notification on `channel` (with its payload), and when the connection is
   * lost or back (payload `""`). Resolves once the channel is listened to; rejects (and subscribes
   * nothing) when it could not be.
   */
  async subscribe(
    channel: string,
    wake: ChannelWake,
    options: SubscribeOptions = {},
  ): Promise<ChannelSubscription> {
    if (this.#closed) throw new Error("the listener is closed");
    let wakes = this.#channels.get(channel);
    if (wakes === undefined) this.#channels.set(channel, wakes = new Set());
    wakes.add(wake);
    try {
      await this.#listen(channel);
      if (options.waiting === true) await this.startWaiting(channel);
    } catch (error) {
      await this.#remove(channel, wake);
      throw error;
    }
    return { close: () => this.#remove(channel, wake) };
  }

  /**
   * Tells senders that this session waits for notifications on `channel` (pgflow.listen_start: they
   * notify a channel only while someone waits), then waits out every sender that looked before
   * and so may not notify (pgflow.listen_barrier): a read made after this resolves sees their
   * work. Call it after subscribing. Should the barrier not pass at once (a long transaction that
   * sent work is still open), it is tried again in the background, and the channel's subscribers
   * are woken (`back`) once it passes. Senders are told again whenever the connection comes back.
   */
  async startWaiting(channel: string): Promise<void> {
    this.#waitingFor.add(channel);
    if (!await this.#register([channel])) this.#retryBarrier(channel);
  }

  /** Senders no longer need to notify `channel` for this session. */
  async stopWaiting(channel: string): Promise<void> {
    if (!this.#waitingFor.delete(channel)) return;
    clearTimeout(this.#barrierRetries.get(channel));
    this.#barrierRetries.delete(channel);
    if (this.#closed || this.#conn === undefined) return;
    await this.#call(this.#conn.unsafe(LISTEN_STOP, [JSON.stringify([channel])]), "listen_stop")
      .catch(() => {});
  }

  /** Ends every subscription and the connection; bounded like every call (see the class). */
  async close(): Promise<void> {
    this.#closed = true;
    this.#closing.abort();
    this.#channels.clear();
    this.#listened.clear();
    for (const timer of this.#barrierRetries.values()) clearTimeout(timer);
    this.#barrierRetries.clear();
    const waited = [...this.#waitingFor];
    this.#waitingFor.clear();
    // Senders would otherwise notify for nobody until the next listen_start removes the rows of
    // ended sessions.
    if (waited.length > 0 && this.#conn !== undefined) {
      await this.#call(this.#conn.unsafe(LISTEN_STOP, [JSON.stringify(waited)]), "listen_stop")
        .catch(() => {});
    }
    await this.#conn?.end({ timeout: 1 });
  }

  /** `query`, abandoned (its connection destroyed) once it has gone `timeoutMs` unanswered. */
  #call<T>(query: PromiseLike<T>, what: string): Promise<T> {
    return bounded(query, `LISTEN connection: ${what}`, this.#timeoutMs);
  }

  /**
   * listen_start then listen_barrier, two transactions (the barrier must come after the rows are
   * committed), sent together on the one connection: one round trip. Whether the barrier passed.
   */
  async #register(channels: readonly string[]): Promise<boolean> {
    const conn = this.#connection();
    const json = JSON.stringify(channels);
    const [, passed] = await Promise.all([
      this.#call(conn.unsafe(LISTEN_START, [json]), "listen_start"),
      this.#call(conn.unsafe<{ passed: boolean }[]>(LISTEN_BARRIER, [json]), "listen_barrier"),
    ]);
    return passed[0]?.passed === true;
  }

  /** Tries the barrier again after `delayMs`, doubling (to a second) while it does not pass. */
  #retryBarrier(channel: string, delayMs = BARRIER_RETRY_MS): void {
    if (this.#barrierRetries.has(channel) || this.#closed) return;
    this.#barrierRetries.set(
      channel,
      setTimeout(async () => {
        // Timers are cleared by `close`, so the listener is open here.
        const barrier = this.#connection()
          .unsafe<{ passed: boolean }[]>(LISTEN_BARRIER, [JSON.stringify([channel])]);
        const passed = await this.#call(barrier, "listen_barrier")
          .then((rows) => rows[0]?.passed === true, () => false);
        this.#barrierRetries.delete(channel);
        if (this.#closed || !this.#waitingFor.has(channel)) return;
        // What the senders that held it back sent was announced to no one.
        if (passed) this.#notify(channel, "back");
        else this.#retryBarrier(channel, Math.min(delayMs * 2, 1_000));
      }, delayMs),
    );
  }

  #connection(): Sql {
    // A connection opened after `close` would outlive the listener.
    if (this.#closed) throw new Error("the listener is closed");
    // `options` is postgres.js's parsed option object; postgres.js's own listen opens its
    // connection from it the same way.
    return this.#conn ??= postgres({
      ...this.#options,
      max: 1,
      idle_timeout: null,
      max_lifetime: null,
      fetch_types: false,
      ...(this.#applicationName === undefined ? {} : {
        connection: {
          ...this.#options.connection as Record<string, unknown> | undefined,
          application_name: this.#applicationName,
        },
      }),
      onnotify: (channel: string, payload: string) => this.#notify(channel, "notify", payload),
      onclose: () => this.#lost(),
    } as unknown as postgres.Options<Record<string, postgres.PostgresType>>);
  }

  async #listen(channel: string): Promise<void> {
    if (this.#listened.has(channel)) return;
    await this.#call(this.#connection().unsafe(`listen ${quoteIdentifier(channel)}`), "LISTEN");
    this.#listened.add(channel);
  }

  async #remove(channel: string, wake: ChannelWake): Promise<void> {
    const wakes = this.#channels.get(channel);
    if (wakes === undefined || !wakes.delete(wake) || wakes.size > 0) return;
    this.#channels.delete(channel);
    await this.stopWaiting(channel);
    if (this.#listened.delete(channel) && !this.#closed) {
      await this.#call(
        this.#connection().unsafe(`unlisten ${quoteIdentifier(channel)}`),
        "UNLISTEN",
      )
        .catch(() => {});
    }
  }

  #notify(channel: string, event: ChannelEvent, payload = ""): void {
    for (const wake of this.#channels.get(channel) ?? []) wake(event, payload);
  }

  #wakeAll(event: ChannelEvent): void {
    for (const channel of this.#channels.keys()) this.#notify(channel, event);
  }

  /** The connection is gone, and its LISTENs with it: listen again until it works. */
  #lost(): void {
    this.#listened.clear();
    if (this.#closed) return;
    this.#wakeAll("lost");
    if (this.#healing) return;
    this.#healing = true;
    void this.#heal().finally(() => this.#healing = false);
  }

  async #heal(): Promise<void> {
    let delay = 100;
    while (!this.#closed && this.#channels.size > 0) {
      try {
        for (const channel of [...this.#channels.keys()]) await this.#listen(channel);
        if ([...this.#channels.keys()].every((c) => this.#listened.has(c))) {
          // The rows of the lost session name a backend that is gone (or going): tell senders
          // again, from this one.
          const waited = [...this.#waitingFor];
          if (waited.length > 0 && !await this.#register(waited)) {
            for (const channel of waited) this.#retryBarrier(channel);
          }
          // Everything missed while the connection was down is still to be read.
          this.#wakeAll("back");
          return;
        }
      } catch {
        await sleep(delay, this.#closing.signal);
        delay = Math.min(delay * 2, 2000);
      }
    }
  }
}

// The channels go as one JSON text: the LISTEN connection does not fetch array types.
const CHANNELS = "array(select jsonb_array_elements_text($1::text::jsonb))";
const LISTEN_START = `select pgflow.listen_start(${CHANNELS})`;
const LISTEN_STOP = `select pgflow.listen_stop(${CHANNELS})`;
const LISTEN_BARRIER = `select pgflow.listen_barrier(${CHANNELS}) as passed`;
/** How long a barrier that did not pass first waits before it is tried again. */
const BARRIER_RETRY_MS = 20;

/** A channel name as a quoted SQL identifier (LISTEN takes no parameters). */
function quoteIdentifier(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}
