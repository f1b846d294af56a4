/**
 * Loaded (`deno run --preload`) before an Edge Function's entry in each isolate the stand-in
 * supervisor starts (supervisor.ts): what the Supabase Edge runtime gives a function and what it
 * sees of it.
 *
 * - `EdgeRuntime.waitUntil(promise)`: the promise is tracked; the supervisor is told how many are
 *   pending, and drops an isolate that has none and no request in flight (the early drop).
 * - `Deno.serve(handler)`: served on 127.0.0.1 at a port the supervisor is told; requests in
 *   flight are counted.
 * - The supervisor's `unload` command dispatches `beforeunload` with `detail.reason`
 *   (`WallClockTime`, `CPUTime`, `Memory`, `EarlyDrop`), as the runtime does before the end.
 * - `globalThis.__edgeStandIn` tells the soak's handlers which isolate they run in and whether
 *   `beforeunload` has been dispatched (read synchronously, before a handler's first await).
 *
 * The control channel is a Unix socket (`EDGE_STANDIN_CONTROL`), newline-delimited JSON, so the
 * function's own stdout and stderr stay exactly what it wrote.
 *
 * @module
 */

/** What the soak's handlers read. */
interface StandInGlobal {
  readonly isolateId: string;
  unloadReason: string | undefined;
}

const isolateId = Deno.env.get("SB_EXECUTION_ID") ?? "unknown";
const controlPath = Deno.env.get("EDGE_STANDIN_CONTROL");
if (controlPath === undefined) throw new Error("EDGE_STANDIN_CONTROL is not set");

const standIn: StandInGlobal = { isolateId, unloadReason: undefined };
(globalThis as { __edgeStandIn?: StandInGlobal }).__edgeStandIn = standIn;

// Deno runs the entry only once a preload has no pending work at all, so the control connection
// is opened when the function first calls Deno.serve; messages before that wait in `writing`.
const opened = Promise.withResolvers<Deno.UnixConn>();
const connecting = opened.promise;
let connected = false;
function connect(): void {
  if (connected) return;
  connected = true;
  Deno.connect({ transport: "unix", path: controlPath! }).then(opened.resolve, opened.reject);
  listen();
}
const encoder = new TextEncoder();
let writing: Promise<void> = Promise.resolve();
function send(message: Record<string, unknown>): void {
  const bytes = encoder.encode(JSON.stringify({ ...message, at: Date.now() }) + "\n");
  writing = writing.then(async () => {
    const conn = await connecting;
    let off = 0;
    while (off < bytes.length) off += await conn.write(bytes.subarray(off));
  }).catch(() => {});
}

const pending = new Set<Promise<unknown>>();
let requests = 0;
const state = () => send({ type: "state", pending: pending.size, requests });

(globalThis as { EdgeRuntime?: unknown }).EdgeRuntime = {
  waitUntil(promise: Promise<unknown>): void {
    pending.add(promise);
    state();
    const settle = () => {
      pending.delete(promise);
      state();
    };
    promise.then(settle, settle);
  },
};

const serve = Deno.serve.bind(Deno);
type Handler = (
  request: Request,
  info: Deno.ServeHandlerInfo<Deno.NetAddr>,
) => Response | Promise<Response>;
(Deno as unknown as { serve: unknown }).serve = (
  first: Handler | { handler?: Handler },
  second?: Handler,
) => {
  const handler = typeof first === "function" ? first : second ?? first.handler;
  if (handler === undefined) throw new Error("Deno.serve: no handler");
  connect();
  return serve({
    hostname: "127.0.0.1",
    port: 0,
    onListen: ({ port }) => send({ type: "listening", port }),
  }, async (request, info) => {
    requests++;
    state();
    try {
      return await handler(request, info);
    } finally {
      requests--;
      state();
    }
  });
};

send({ type: "hello", id: isolateId, pid: Deno.pid });

async function listen(): Promise<void> {
  const conn = await connecting;
  const decoder = new TextDecoder();
  let buffer = "";
  const chunk = new Uint8Array(4096);
  while (true) {
    const n = await conn.read(chunk).catch(() => null);
    if (n === null) return;
    buffer += decoder.decode(chunk.subarray(0, n), { stream: true });
    let newline;
    while ((newline = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, newline);
      buffer = buffer.slice(newline + 1);
      const command = JSON.parse(line) as { type: string; reason?: string; spin?: boolean };
      if (command.type === "unload" && standIn.unloadReason === undefined) {
        // Set before the listeners run: a handler that starts from now on is a late start.
        standIn.unloadReason = command.reason;
        globalThis.dispatchEvent(
          new CustomEvent("beforeunload", { detail: { reason: command.reason } }),
        );
        send({ type: "unloaded", reason: command.reason });
        state();
        if (command.spin === true) {
          // Code that ignores the notice and keeps the CPU busy, until the hard limit ends it.
          setTimeout(() => {
            for (;;) Math.sqrt(Math.random());
          }, 20);
        }
      }
    }
  }
}
