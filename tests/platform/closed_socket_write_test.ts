/**
 * postgres.js can write to a connection it has already closed, from a `setImmediate` outside any
 * promise (a pooler restart triggers it): the worker's guard keeps the process alive through that
 * one error, and through no other. Each case runs in a process of its own, since it is about what
 * ends a process.
 */
import assert from "node:assert/strict";

const GUARD = new URL("../../src/platform/closed_socket_write.ts", import.meta.url).href;

/** Runs a script that triggers `thrown` from an immediate in a file named like the driver's. */
async function survive(thrown: string, guarded: boolean): Promise<{ code: number; out: string }> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-closed-write-" });
  try {
    await Deno.mkdir(`${dir}/postgres/src`, { recursive: true });
    // The driver's shape: a short write deferred to setImmediate, the socket nulled meanwhile.
    await Deno.writeTextFile(
      `${dir}/postgres/src/connection.js`,
      `import { setImmediate } from "node:timers";
       let socket = { write() {} };
       export function writeThenClose() {
         setImmediate(function nextWrite() { ${thrown} });
         socket = null;
       }`,
    );
    await Deno.writeTextFile(
      `${dir}/main.ts`,
      `import { guardClosedSocketWrites } from "${GUARD}";
       import { writeThenClose } from "./postgres/src/connection.js";
       const log = { warn: (e: string) => console.log("warn:", e), error() {}, info() {}, debug() {} };
       if (${guarded}) guardClosedSocketWrites(log as never);
       writeThenClose();
       setTimeout(() => console.log("alive"), 100);`,
    );
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--no-lock", `${dir}/main.ts`],
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code: out.code, out: new TextDecoder().decode(out.stdout) };
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

Deno.test("the driver's write to a closed connection is a warning, not the end of the process", async () => {
  const r = await survive("socket.write('x');", true);
  assert.equal(r.code, 0, r.out);
  assert.match(r.out, /warn: database driver wrote to a closed connection; ignored/);
  assert.match(r.out, /alive/);
});

Deno.test("without the guard the same write ends the process (what a worker did on a pooler restart)", async () => {
  const r = await survive("socket.write('x');", false);
  assert.notEqual(r.code, 0);
  assert.doesNotMatch(r.out, /alive/);
});

Deno.test("any other uncaught error still ends the process", async () => {
  const r = await survive("throw new TypeError('something else');", true);
  assert.notEqual(r.code, 0);
  assert.doesNotMatch(r.out, /alive/);
});
