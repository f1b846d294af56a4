import { Buffer } from "node:buffer";
import { EventEmitter } from "node:events";
import net from "node:net";
import tls from "node:tls";
import { setImmediate } from "node:timers";

/**
 * How a pool negotiates TLS: `false` (none), libpq's `sslmode` names (`prefer` and `allow` try
 * TLS and fall back, `require` insists without verifying the certificate, `verify-full`
 * verifies it against the system's CAs and the host name), or explicit options (verified unless
 * `rejectUnauthorized` is false).
 *
 * @example
 * ```ts
 * import type { SslSetting } from "@pgflow/shared";
 *
 * const pinned: SslSetting = { ca: "-----BEGIN CERTIFICATE-----...", servername: "db.example.com" };
 * ```
 */
export type SslSetting =
  | false
  | "prefer"
  | "require"
  | "allow"
  | "verify-full"
  | {
    /** CA certificates (PEM) to verify the server with, instead of the system's. */
    readonly ca?: string | readonly string[];
    /** `false` accepts any certificate (as `require`). */
    readonly rejectUnauthorized?: boolean;
    /** The host name to verify, when it differs from the connection's. */
    readonly servername?: string;
  };

/** Where and how a {@link GatedSocket} connects. */
export interface GateTarget {
  readonly host: string;
  readonly port: number;
  /** A Unix socket path instead of host and port. */
  readonly path?: string;
  readonly ssl: SslSetting;
}

/** Sockets by the backend key the server sent (BackendKeyData), to find a query's connection. */
const byBackendKey = new Map<string, GatedSocket>();

/**
 * The socket carrying the connection whose BackendKeyData was (`pid`, `secret`), if it is a gated
 * socket still open. A pooler sends keys of its own, so they identify the client connection.
 */
export function socketForBackend(pid: number, secret: number): GatedSocket | undefined {
  return byBackendKey.get(`${pid}:${secret}`);
}

const SSL_REQUEST = Buffer.from([0, 0, 0, 8, 4, 210, 22, 47]);
const SYNC = 0x53; // 'S'
const QUERY = 0x51; // 'Q'
const COPY_DONE = 0x63; // 'c'
const COPY_FAIL = 0x66; // 'f'
const TERMINATE = 0x58; // 'X'
const READY_FOR_QUERY = 0x5a; // 'Z'
const BACKEND_KEY_DATA = 0x4b; // 'K'
const COPY_IN_RESPONSE = 0x47; // 'G'
const COPY_BOTH_RESPONSE = 0x57; // 'W'

/**
 * A Postgres client socket (the shape postgres.js expects of its `socket` option) that never lets
 * a connection carry a message of the next request while a Sync or simple Query is unanswered.
 *
 * Why: postgres.js pipelines. A query without parameters (`sql\`select now()\``, its own type
 * lookup) is written onto a connection that is still waiting for an earlier query's
 * ReadyForQuery, and a query whose parameters fail to serialize writes a lone Sync and leaves the
 * connection open for the next query. A transaction-mode pooler (Supavisor, PgBouncer) returns the
 * server connection to its pool at the first ReadyForQuery outside a transaction, so the messages
 * already sent behind it run on a server connection the client no longer owns: their replies are
 * dropped ("got packet '1' from server when not linked") and the client waits forever. Holding
 * every message written after a Sync until that Sync's ReadyForQuery arrives makes each request
 * start on a connection the pooler has settled; postgres.js still sees its replies in order.
 *
 * During COPY FROM STDIN the client's data belongs to the query in flight, so it passes.
 */
export class GatedSocket extends EventEmitter {
  readonly host: string;
  readonly port: number;
  #raw: net.Socket;
  #inner: net.Socket;
  #ready = false;
  #closed = false;
  #outbox: Buffer[] = [];
  #outboxBytes = 0;
  #callbacks: { end: number; fn: (error?: Error | null) => void }[] = [];
  #sentBytes = 0;
  #queuedBytes = 0;
  #startupSent = false;
  #unanswered = 0;
  #copyIn = false;
  #inHeader = Buffer.alloc(5);
  #inHeaderLength = 0;
  #inRemaining = 0;
  #inType = 0;
  #keyBody: number[] | null = null;
  #backendKey?: string;
  /** When the oldest unanswered request was sent (performance.now()), or null. */
  #waitingSince: number | null = null;
  /** ReadyForQuery messages received so far (the startup's, then the type fetch's, ...). */
  #readies = 0;
  /** Whether postgres.js is handling data this socket handed it (its writes are then re-entrant). */
  #delivering = false;
  /** Whether the outbox waits for the next event-loop turn (see `write`). */
  #heldForTurn = false;

  constructor(target: GateTarget) {
    super();
    this.host = target.host;
    this.port = target.port;
    this.#raw = target.path !== undefined
      ? net.connect({ path: target.path })
      : net.connect({ host: target.host, port: target.port });
    this.#inner = this.#raw;
    this.#raw.on("error", (error: Error) => this.emit("error", error));
    this.#raw.on("close", (hadError: boolean) => this.#onClose(hadError));
    if (target.ssl === false) {
      this.#attach(this.#raw);
    } else {
      this.#raw.once("connect", () => this.#negotiateTls(target));
    }
  }

  /** Milliseconds the oldest unanswered request on this connection has waited, or 0. */
  get waitingMs(): number {
    return this.#waitingSince === null ? 0 : performance.now() - this.#waitingSince;
  }

  /** As node's `socket.readyState`, as far as postgres.js asks (`open` or `closed`). */
  get readyState(): string {
    return this.#closed ? "closed" : this.#inner.readyState;
  }

  /**
   * Queues `chunk`; sends what may go now. Returns false under backpressure.
   *
   * A connection's first query waits for the next event-loop turn when postgres.js writes it
   * while handling the startup's or the type fetch's ReadyForQuery. postgres.js 3.4.7 learns how
   * to send and read arrays from that fetch, but applies its result a few promise jobs after the
   * ReadyForQuery that starts the first query; under Deno a reply that is already there is
   * handled among those jobs, so a first query written at once (postgres.js writes at once what
   * is 1 KB or more) that the server answers while the process is descheduled binds its array
   * parameters as `'' + array` ("malformed array literal") and reads array columns as text. After
   * the turn every pending promise job has run. Later queries do not wait.
   */
  write(chunk: Uint8Array | string, fn?: (error?: Error | null) => void): boolean {
    const bytes = typeof chunk === "string" ? Buffer.from(chunk) : Buffer.from(chunk);
    this.#outbox.push(bytes);
    this.#outboxBytes += bytes.length;
    this.#queuedBytes += bytes.length;
    if (fn) this.#callbacks.push({ end: this.#queuedBytes, fn });
    if (this.#delivering && this.#readies >= 1 && this.#readies <= 2 && !this.#heldForTurn) {
      this.#heldForTurn = true;
      setImmediate(() => {
        this.#heldForTurn = false;
        this.#pump();
      });
    }
    return this.#pump();
  }

  /** Sends `chunk` (postgres.js's Terminate) after what may go now, then closes; drops the rest. */
  end(chunk?: Uint8Array): this {
    if (chunk !== undefined && chunk[0] === TERMINATE) {
      this.#outbox = [];
      this.#outboxBytes = 0;
      this.#inner.end(Buffer.from(chunk));
    } else {
      if (chunk !== undefined) this.write(chunk);
      this.#inner.end();
    }
    return this;
  }

  /** Closes at once; `error`, when given, is emitted first. */
  destroy(error?: Error): this {
    this.#inner.destroy(error);
    if (this.#inner !== this.#raw) this.#raw.destroy();
    return this;
  }

  setKeepAlive(enable: boolean, delayMs: number): this {
    this.#raw.setKeepAlive(enable, delayMs);
    return this;
  }

  pause(): this {
    this.#inner.pause();
    return this;
  }

  resume(): this {
    this.#inner.resume();
    return this;
  }

  #negotiateTls(target: GateTarget): void {
    this.#raw.write(SSL_REQUEST);
    this.#raw.once("data", (answer: Buffer) => {
      if (answer[0] !== 0x53) {
        if (target.ssl === "prefer" || target.ssl === "allow") return this.#attach(this.#raw);
        this.#raw.destroy(new Error("the server does not support SSL connections"));
        return;
      }
      const ssl = target.ssl;
      const options: tls.ConnectionOptions = typeof ssl === "object"
        ? { ...ssl, ca: ssl.ca as string | string[] | undefined }
        : ssl === "verify-full"
        ? {}
        : { rejectUnauthorized: false };
      const secure = tls.connect({
        socket: this.#raw,
        servername: net.isIP(target.host) ? undefined : target.host,
        ...options,
      });
      this.#inner = secure;
      secure.on("error", (error: Error) => this.emit("error", error));
      secure.once("secureConnect", () => this.#attach(secure));
    });
  }

  #attach(stream: net.Socket): void {
    stream.on("data", (data: Buffer) => this.#onData(data));
    stream.on("drain", () => this.emit("drain"));
    this.#ready = true;
    this.#pump();
  }

  #onClose(hadError: boolean): void {
    if (this.#closed) return;
    this.#closed = true;
    if (this.#backendKey !== undefined && byBackendKey.get(this.#backendKey) === this) {
      byBackendKey.delete(this.#backendKey);
    }
    const pending = this.#callbacks;
    this.#callbacks = [];
    for (const { fn } of pending) fn(new Error("connection closed"));
    this.emit("close", hadError);
  }

  /** Sends every whole message that may go now; holds the rest. */
  #pump(): boolean {
    if (!this.#ready || this.#closed || this.#heldForTurn) return true;
    const send: Buffer[] = [];
    let sendBytes = 0;
    while (this.#outboxBytes > 0) {
      if (this.#unanswered > 0 && !this.#copyIn) break;
      const buffered = this.#peek(5);
      if (buffered === undefined) break;
      const untyped = !this.#startupSent;
      const length = untyped ? buffered.readUInt32BE(0) : buffered.readUInt32BE(1) + 1;
      if (this.#outboxBytes < length) break;
      const message = this.#take(length);
      send.push(message);
      sendBytes += length;
      if (untyped) {
        this.#startupSent = true;
        continue;
      }
      const type = message[0];
      if (type === SYNC || type === QUERY) {
        this.#unanswered++;
        this.#waitingSince ??= performance.now();
      } else if (type === COPY_DONE || type === COPY_FAIL) {
        this.#copyIn = false;
      }
    }
    if (send.length === 0) return true;
    this.#sentBytes += sendBytes;
    const done = this.#callbacks.filter((c) => c.end <= this.#sentBytes);
    this.#callbacks = this.#callbacks.filter((c) => c.end > this.#sentBytes);
    const batch = send.length === 1 ? send[0] : Buffer.concat(send, sendBytes);
    return this.#inner.write(
      batch,
      done.length === 0 ? undefined : (error?: Error | null) => {
        for (const c of done) c.fn(error);
      },
    );
  }

  /** The first `n` bytes of the outbox without removing them, or undefined if fewer. */
  #peek(n: number): Buffer | undefined {
    if (this.#outboxBytes < n) return undefined;
    if (this.#outbox[0].length >= n) return this.#outbox[0];
    const merged = Buffer.concat(this.#outbox, this.#outboxBytes);
    this.#outbox = [merged];
    return merged;
  }

  #take(n: number): Buffer {
    const first = this.#peek(n)!;
    const message = first.subarray(0, n);
    const rest = first.subarray(n);
    this.#outbox[0] = rest;
    if (rest.length === 0) this.#outbox.shift();
    this.#outboxBytes -= n;
    return message;
  }

  /** Watches the server's messages go by (without copying them), then hands the data on. */
  #onData(data: Buffer): void {
    let answered = false;
    let i = 0;
    while (i < data.length) {
      if (this.#inRemaining > 0) {
        const n = Math.min(this.#inRemaining, data.length - i);
        if (this.#keyBody !== null) {
          for (let k = 0; k < n; k++) this.#keyBody.push(data[i + k]);
          if (this.#keyBody.length >= 8) this.#registerKey(this.#keyBody);
        }
        this.#inRemaining -= n;
        i += n;
        continue;
      }
      this.#inHeader[this.#inHeaderLength++] = data[i++];
      if (this.#inHeaderLength < 5) continue;
      this.#inHeaderLength = 0;
      this.#inType = this.#inHeader[0];
      this.#inRemaining = this.#inHeader.readUInt32BE(1) - 4;
      this.#keyBody = this.#inType === BACKEND_KEY_DATA ? [] : null;
      if (this.#inType === READY_FOR_QUERY) this.#readies++;
      if (this.#inType === READY_FOR_QUERY && this.#unanswered > 0) {
        this.#unanswered--;
        this.#waitingSince = this.#unanswered > 0 ? performance.now() : null;
        answered = true;
      } else if (this.#inType === COPY_IN_RESPONSE || this.#inType === COPY_BOTH_RESPONSE) {
        this.#copyIn = true;
        answered = true;
      }
    }
    this.#delivering = true;
    try {
      this.emit("data", data);
    } finally {
      this.#delivering = false;
    }
    if (answered) this.#pump();
  }

  #registerKey(body: number[]): void {
    const b = Buffer.from(body.slice(0, 8));
    this.#keyBody = null;
    this.#backendKey = `${b.readUInt32BE(0)}:${b.readUInt32BE(4)}`;
    byBackendKey.set(this.#backendKey, this);
  }
}
