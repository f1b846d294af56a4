/**
 * A Postgres wire-protocol proxy for tests: it forwards bytes both ways and watches the messages
 * go by, to check what a transaction pooler relies on and to lose replies on purpose.
 *
 * - `violations` counts client messages sent while a Sync (or simple Query) of the same
 *   connection is unanswered: what a transaction pooler cannot route (see docs/connections.md).
 * - `loseReplies()` drops every byte the server sends on the connections open at that moment, as
 *   a pooler that lost track of them would; new connections are not affected.
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
    const fromClient = scanner(true, (type) => {
      if (unanswered > 0 && type !== 0x58) violations++;
      if (type === 0x53 || type === 0x51) unanswered++;
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
    async close() {
      listener.close();
      for (const pipe of pipes) pipe.close();
      await accepting;
    },
  };
}

/** Calls `onMessage(type)` for each message in a byte stream; the client's first is untyped. */
function scanner(client: boolean, onMessage: (type: number) => void): (chunk: Uint8Array) => void {
  let startup = client;
  let header = new Uint8Array(0);
  let remaining = 0;
  return (chunk) => {
    let i = 0;
    while (i < chunk.length) {
      if (remaining > 0) {
        const n = Math.min(remaining, chunk.length - i);
        remaining -= n;
        i += n;
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
      if (startup) {
        remaining = view.getUint32(0) - 4;
        startup = false;
      } else {
        remaining = view.getUint32(1) - 4;
        onMessage(header[0]);
      }
      header = new Uint8Array(0);
    }
  };
}

async function writeAll(conn: Deno.Conn, data: Uint8Array): Promise<void> {
  let offset = 0;
  while (offset < data.length) offset += await conn.write(data.subarray(offset));
}
