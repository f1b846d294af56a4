import postgres from "npm:postgres@3.4.7";
import type { Sql } from "../../platform/types.ts";
import type { Subscription, WakeSource } from "../backend.ts";

/** The channel a run's notifications are sent on (see supabase/schemas/0850_run_events.sql). */
export function runChannel(runId: string): string {
  return `pgflow_run:${runId}`;
}

/**
 * LISTEN on a connection of its own, opened with the options of the client's pool (so the same
 * host, credentials, TLS and socket), for direct and session-pooler connections.
 *
 * The connection is the source's own rather than postgres.js's `sql.listen`: when the connection
 * is lost (a Postgres restart), postgres.js tries to LISTEN again once and gives up for good if
 * the server is still down. Here every channel is listened to again, with backoff, until it
 * works; then every subscriber is woken, because what happened in the meantime was not announced.
 */
export function listenSource(sql: Sql): WakeSource {
  return new ListenHub(sql);
}

class ListenHub implements WakeSource {
  readonly name = "listen";
  readonly pushes = true;
  readonly #options: Record<string, unknown>;
  #conn: Sql | undefined;
  readonly #channels = new Map<string, Set<() => void>>();
  /** Channels the current connection listens on. */
  readonly #listened = new Set<string>();
  #healing = false;
  #closed = false;

  constructor(sql: Sql) {
    this.#options = (sql as unknown as { options: Record<string, unknown> }).options;
  }

  async subscribe(runId: string, wake: () => void): Promise<Subscription> {
    if (this.#closed) throw new Error("the client is closed");
    const channel = runChannel(runId);
    let wakes = this.#channels.get(channel);
    if (wakes === undefined) this.#channels.set(channel, wakes = new Set());
    wakes.add(wake);
    try {
      await this.#listen(channel);
    } catch (error) {
      this.#remove(channel, wake);
      throw error;
    }
    return { close: () => this.#remove(channel, wake) };
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#channels.clear();
    await this.#conn?.end({ timeout: 1 });
  }

  #connection(): Sql {
    // `options` is postgres.js's parsed option object; postgres.js's own listen opens its
    // connection from it the same way.
    return this.#conn ??= postgres({
      ...this.#options,
      max: 1,
      idle_timeout: null,
      max_lifetime: null,
      fetch_types: false,
      onnotify: (channel: string) => this.#notify(channel),
      onclose: () => this.#lost(),
    } as unknown as postgres.Options<Record<string, postgres.PostgresType>>);
  }

  async #listen(channel: string): Promise<void> {
    if (this.#listened.has(channel)) return;
    await this.#connection().unsafe(`listen ${quote(channel)}`);
    this.#listened.add(channel);
  }

  async #remove(channel: string, wake: () => void): Promise<void> {
    const wakes = this.#channels.get(channel);
    if (wakes === undefined || !wakes.delete(wake) || wakes.size > 0) return;
    this.#channels.delete(channel);
    if (this.#listened.delete(channel) && !this.#closed) {
      await this.#connection().unsafe(`unlisten ${quote(channel)}`).catch(() => {});
    }
  }

  #notify(channel: string): void {
    for (const wake of this.#channels.get(channel) ?? []) wake();
  }

  /** The connection is gone, and its LISTENs with it: listen again until it works. */
  #lost(): void {
    this.#listened.clear();
    if (this.#healing || this.#closed) return;
    this.#healing = true;
    void this.#heal().finally(() => this.#healing = false);
  }

  async #heal(): Promise<void> {
    let delay = 100;
    while (!this.#closed && this.#channels.size > 0) {
      try {
        for (const channel of [...this.#channels.keys()]) await this.#listen(channel);
        // Everything missed while the connection was down is in the runs' current state.
        for (const channel of this.#channels.keys()) this.#notify(channel);
        if ([...this.#channels.keys()].every((c) => this.#listened.has(c))) return;
      } catch {
        await new Promise((r) => setTimeout(r, delay));
        delay = Math.min(delay * 2, 2000);
      }
    }
  }
}

function quote(identifier: string): string {
  return `"${identifier.replace(/"/g, '""')}"`;
}
