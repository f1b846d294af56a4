/**
 * A Postgres wire-protocol proxy for tests: it forwards bytes both ways and watches the messages
 * go by, to check what a transaction pooler relies on and to lose replies on purpose.
 *
 * - `violations` counts client messages sent while a Sync (or simple Query) of the same
 *   connection is unanswered: what a transaction pooler cannot route (see docs/connections.md).
 * - `loseReplies()` drops every byte the server sends on the connections open at that moment, as
 *   a pooler that lost track of them would (silent connections); new connections are not affected.
 * - `loseReplyTo(pattern)` does so on the one connection that next runs a statement whose text
 *   matches, from that statement on: the reply of that very call is lost, whichever connection the
 *   pool sent it on; other connections are not affected.
 *
 * @module
 */

/** A running proxy. */
export interface WireProxy {
  /** The port clients connect to. */
  readonly port: number;
  /** `url` with its host and port replaced by the proxy's. */
  via(url: string): string;
  /** Client messages sent behind an unanswered Sync, over all connections so far. */
  readonly violations: number;
  /** Connections accepted so far. */
  readonly connections: number;
  /** Connections open now (closed once either side closes). */
  readonly open: number;
  /** From now on, drops the server's bytes on every connection open now. */
  loseReplies(): void;
  /**
   * Drops the server's bytes, from then on, on the connection that next runs a statement whose
   * text matches `statement` (once); resolves with that text when it has been sent.
   */
  loseReplyTo(statement: RegExp): Promise<string>;
  /** Closes the listener and every connection. */
  close(): Promise<void>;
}

interface Pipe {
  lose: boolean;
  close(): void;
}

/**
 * Starts a proxy on a free loopback port in front of `targetPort`.
 *
 * @example
 * ```ts
 * const proxy = await startWireProxy(5432);
 * const sql = createPool(proxy.via(url));
 * await proxy.close();
 * ```
 */
export function startWireProxy(targetPort: number): WireProxy {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  const pipes = new Set<Pipe>();
  const armed: { statement: RegExp; lost: (text: string) => void }[] = [];
  let violations = 0;
  let connections = 0;
  const accepting = (async () => {
    for await (const client of listener) {
      connections++;
      serve(client).catch(() => {});
    }
  })().catch(() => {});

  async function serve(client: Deno.Conn): Promise<void> {
    let server: Deno.Conn;
    try {
      server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
    } catch {
      client.close();
      return;
    }
    let unanswered = 0;
    const pipe: Pipe = {
      lose: false,
      close() {
        for (const c of [client, server]) {
          try {
            c.close();
          } catch {
            // Already closed.
          }
        }
      },
    };
    pipes.add(pipe);
    // Statement texts by name (Parse), for a Bind that runs a statement parsed earlier.
    const statements = new Map<string, string>();
    const runs = (text: string | undefined) => {
      if (text === undefined) return;
      const i = armed.findIndex((a) => a.statement.test(text));
      if (i < 0) return;
      pipe.lose = true;
      armed.splice(i, 1)[0].lost(text);
    };
    const fromClient = scanner(true, (type, body) => {
      if (unanswered > 0 && type !== 0x58) violations++;
      if (type === 0x53 || type === 0x51) unanswered++;
      if (type === 0x50) {
        const [name, text] = cstrings(body, 2);
        statements.set(name, text);
      } else if (type === 0x42) runs(statements.get(cstrings(body, 2)[1]));
      else if (type === 0x51) runs(cstrings(body, 1)[0]);
    });
    const fromServer = scanner(false, (type) => {
      if (type === 0x5a && unanswered > 0) unanswered--;
    });
    const up = (async () => {
      for await (const chunk of client.readable) {
        fromClient(chunk);
        await writeAll(server, chunk);
      }
    })();
    const down = (async () => {
      for await (const chunk of server.readable) {
        if (pipe.lose) continue;
        fromServer(chunk);
        await writeAll(client, chunk);
      }
    })();
    await Promise.race([up, down]).catch(() => {});
    pipes.delete(pipe);
    pipe.close();
  }

  return {
    port,
    via(url: string): string {
      const u = new URL(url);
      u.hostname = "127.0.0.1";
      u.port = String(port);
      return u.toString();
    },
    get violations() {
      return violations;
    },
    get connections() {
      return connections;
    },
    get open() {
      return pipes.size;
    },
    loseReplies() {
      for (const pipe of pipes) pipe.lose = true;
    },
    loseReplyTo(statement: RegExp) {
      return new Promise<string>((lost) => armed.push({ statement, lost }));
    },
    async close() {
      listener.close();
      for (const pipe of pipes) pipe.close();
      await accepting;
    },
  };
}

/** The first `n` NUL-terminated strings of a message body (empty when cut short). */
function cstrings(body: Uint8Array, n: number): string[] {
  const out: string[] = [];
  const decoder = new TextDecoder();
  for (let start = 0; out.length < n;) {
    const end = body.indexOf(0, start);
    if (end < 0) break;
    out.push(decoder.decode(body.subarray(start, end)));
    start = end + 1;
  }
  while (out.length < n) out.push("");
  return out;
}

/** How much of a message's body {@link scanner} passes on: statement names and texts fit. */
const BODY_HEAD = 64 * 1024;

/**
 * Calls `onMessage(type, body)` for each message in a byte stream, `body` being its first
 * {@link BODY_HEAD} bytes; the client's first message is untyped and not reported.
 */
function scanner(
  client: boolean,
  onMessage: (type: number, body: Uint8Array) => void,
): (chunk: Uint8Array) => void {
  let startup = client;
  let header = new Uint8Array(0);
  let remaining = 0;
  let type = 0;
  let body: Uint8Array[] = [];
  let kept = 0;
  const end = () => {
    const whole = new Uint8Array(kept);
    let at = 0;
    for (const part of body) {
      whole.set(part, at);
      at += part.length;
    }
    body = [];
    kept = 0;
    onMessage(type, whole);
  };
  return (chunk) => {
    let i = 0;
    while (i < chunk.length) {
      if (remaining > 0) {
        const n = Math.min(remaining, chunk.length - i);
        if (!startup && kept < BODY_HEAD) {
          const part = chunk.slice(i, i + Math.min(n, BODY_HEAD - kept));
          body.push(part);
          kept += part.length;
        }
        remaining -= n;
        i += n;
        if (remaining === 0) {
          if (startup) startup = false;
          else end();
        }
        continue;
      }
      const need = startup ? 4 : 5;
      const take = Math.min(need - header.length, chunk.length - i);
      const next = new Uint8Array(header.length + take);
      next.set(header);
      next.set(chunk.subarray(i, i + take), header.length);
      header = next;
      i += take;
      if (header.length < need) continue;
      const view = new DataView(header.buffer);
      header = new Uint8Array(0);
      if (startup) {
        remaining = view.getUint32(0) - 4;
        if (remaining === 0) startup = false;
      } else {
        type = view.getUint8(0);
        remaining = view.getUint32(1) - 4;
        if (remaining === 0) end();
      }
    }
  };
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < data.length) offset += await conn.write(data.subarray(offset));
}
