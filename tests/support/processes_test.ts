/**
 * What a test file leaves running is stopped and named, except a watchdog doing its stop: that is
 * left to finish (its note says what it stopped), however long a busy machine makes it take.
 */
import assert from "node:assert/strict";
import { WATCHDOG_NAME } from "../../src/cli/db/watchdog.ts";
import { isRunning, stopLeftovers } from "./processes.ts";

Deno.test("a watchdog doing its stop is left to finish; what else is left is stopped and named", async () => {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-leftovers-" });
  const env = { PGFLOW_LEFTOVERS_TEST: dir };
  // Stands in for a watchdog whose starter ended: its stop outlasts the grace (its `sleep` is one
  // of its own processes, not a leftover).
  const watchdog = new Deno.Command("sh", {
    args: ["-c", 'sleep 2; echo done > "$PGFLOW_LEFTOVERS_TEST/stopped"', WATCHDOG_NAME],
    env,
  }).spawn();
  const leak = new Deno.Command("sleep", { args: ["600"], env }).spawn();
  try {
    const stopped = await stopLeftovers({ envPrefix: `PGFLOW_LEFTOVERS_TEST=${dir}` }, {
      graceMs: 200,
    });
    assert.deepEqual(stopped.map((p) => p.pid), [leak.pid]);
    assert.equal(await Deno.readTextFile(`${dir}/stopped`), "done\n", "the watchdog finished");
    await Promise.all([watchdog.status, leak.status]);
    assert.ok(!isRunning(leak.pid));
  } finally {
    for (const child of [watchdog, leak]) {
      try {
        child.kill("SIGKILL");
      } catch {
        // Already ended.
      }
    }
    await Promise.all([watchdog.status, leak.status]);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a zombie is not running", async () => {
  // The background `read` ends when its input closes, which the test does only once `sh` has
  // become `sleep`: a parent that never reaps it (`sh` might have).
  const parent = new Deno.Command("sh", {
    // (fd 3: a background command's own standard input is /dev/null.)
    args: ["-c", "exec 3<&0; read -r _ <&3 & echo $!; exec sleep 600 3<&-"],
    stdin: "piped",
    stdout: "piped",
  }).spawn();
  const lines = parent.stdout.pipeThrough(new TextDecoderStream()).getReader();
  const poll = async (done: () => Promise<boolean>) => {
    while (!(await done())) await new Promise((r) => setTimeout(r, 20));
  };
  try {
    let out = "";
    while (!out.includes("\n")) out += (await lines.read()).value ?? "";
    const zombie = Number(out.trim());
    await poll(async () =>
      (await Deno.readTextFile(`/proc/${parent.pid}/cmdline`)).startsWith("sleep")
    );
    await parent.stdin.close();
    await poll(async () => {
      const stat = await Deno.readTextFile(`/proc/${zombie}/stat`);
      return stat[stat.lastIndexOf(")") + 2] === "Z";
    });
    assert.equal(isRunning(zombie), false);
    assert.equal(isRunning(parent.pid), true);
  } finally {
    await lines.cancel();
    parent.kill("SIGKILL");
    await parent.status;
  }
  assert.equal(isRunning(parent.pid), false);
});
