/**
 * A large message another sender put on a worker's queue never travels to the worker: each read
 * returns it as an id and a disposition only, however often it becomes visible again, while a
 * claimed task's handler still gets its message (`rawMessage`). Bytes are counted on the wire,
 * between the worker's pool and the server. (bench/memory.ts measures what this spares the
 * worker's memory.)
 */
import assert from "node:assert/strict";
import { Flow, type FlowWorker } from "../../mod.ts";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, startWorker, stopAll, waitForRun } from "./helpers.ts";

const db = testDatabase(import.meta.url);

/** A TCP relay in front of `targetPort` that counts the bytes the server sends. */
function countingRelay(targetPort: number) {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const conns: Deno.Conn[] = [];
  const relay = {
    port: (listener.addr as Deno.NetAddr).port,
    fromServer: 0,
    close() {
      listener.close();
      for (const c of conns) {
        try {
          c.close();
        } catch { /* already closed */ }
      }
    },
  };
  (async () => {
    for await (const client of listener) {
      const server = await Deno.connect({ hostname: "127.0.0.1", port: targetPort });
      conns.push(client, server);
      client.readable.pipeTo(server.writable).catch(() => {});
      server.readable.pipeThrough(
        new TransformStream<Uint8Array, Uint8Array>({
          transform(chunk, out) {
            relay.fromServer += chunk.byteLength;
            out.enqueue(chunk);
          },
        }),
      ).pipeTo(client.writable).catch(() => {});
    }
  })().catch(() => {});
  return relay;
}

const MB = 1024 * 1024;

db.test("a foreign 8 MB message is read again and again, but its body never reaches the worker", async ({ sql, url }) => {
  const seen: unknown[] = [];
  const flow = new Flow<{ n: number }>({ slug: "lean_reads" }).step(
    { slug: "work" },
    (input, ctx) => {
      seen.push(ctx.rawMessage.message);
      return input.n;
    },
  );
  const target = new URL(url);
  const relay = countingRelay(Number(target.port));
  target.hostname = "127.0.0.1";
  target.port = String(relay.port);
  const workers: FlowWorker[] = [];
  try {
    const { logs } = await startWorker(workers, flow, {
      connectionString: target.toString(),
      visibilityTimeout: 1,
    });
    await sql`select pgmq.send('lean_reads', jsonb_build_object('blob', repeat('x', ${8 * MB})),
                               jsonb_build_object('blob', repeat('y', ${MB})))`;
    const before = relay.fromServer;
    const run = await startRun(sql, "lean_reads", { n: 7 });
    assert.deepEqual(await waitForRun(sql, run), { status: "completed", output: { work: 7 } });
    // The foreign message becomes visible every second: wait for three more reads of it.
    const unclaimed = () => logs.filter((l) => l.event === "message not claimed (unknown)").length;
    const reads = unclaimed();
    await waitFor(() => unclaimed() >= reads + 3, { what: "three more reads" });
    const received = relay.fromServer - before;
    // Polls, the claim, the completion and heartbeats: kilobytes. Each body would be 9 MB.
    assert.ok(received < MB, `the worker received ${received} bytes`);
    assert.deepEqual(seen, [{
      flow_slug: "lean_reads",
      run_id: run,
      step_slug: "work",
      task_index: 0,
    }]);
  } finally {
    await stopAll(workers);
    relay.close();
  }
});
