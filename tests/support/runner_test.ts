/**
 * The test runner turns a hang into a failure that names the test and what its processes were
 * doing, and leaves nothing running: not after a file overran its bound, not after a file that
 * forgot to stop what it started, not after the runner itself was stopped (SIGTERM) or killed
 * (SIGKILL).
 */
import assert from "node:assert/strict";
import { runTestFile, unfinishedTest } from "./test_file.ts";
import { waitFor } from "./db.ts";
import { isRunning } from "./processes.ts";
import { summaryLines } from "./summary.ts";

const HANG = new URL("./fixtures/hang.ts", import.meta.url).pathname;
const LEAK = new URL("./fixtures/leak.ts", import.meta.url).pathname;
const FAILS = new URL("./fixtures/fails.ts", import.meta.url).pathname;

interface Started {
  postmaster: number;
  sleeper: number;
  /** The server's port; none for the fixture's stand-in server. */
  port?: number;
}

function started(output: string): Started {
  const m = /STARTED (\{.*\})/.exec(output);
  assert.ok(m, `the fixture said what it started; output:\n${output}`);
  return JSON.parse(m[1]);
}

async function gone(s: Started): Promise<boolean> {
  if (isRunning(s.postmaster) || isRunning(s.sleeper)) return false;
  if (s.port === undefined) return true;
  try {
    (await Deno.connect({ hostname: "127.0.0.1", port: s.port })).close();
    return false;
  } catch {
    return true;
  }
}

Deno.test("the runner names the test a hang is in", () => {
  assert.equal(
    unfinishedTest("a ... ok (1ms)\nb ...\n  step ... ok (2ms)\n  stuck ..."),
    "b > stuck",
  );
  assert.equal(
    unfinishedTest("b ...\n------- output -------\nx\n----- output end -----\nb ... FAILED (1s)\n"),
    undefined,
  );
  assert.equal(unfinishedTest("a ... ignored (0ms)\n"), undefined);
  // Deno's notice on a test past a minute, on the open line (whatever quotes the names hold); a
  // result that comes later is printed on a line of its own.
  const slow = "it's slow ...\n  the step's ...'it's slow' has been running for over (1m0s)\n";
  assert.equal(unfinishedTest(slow), "it's slow > the step's");
  assert.equal(unfinishedTest(`${slow} ok (1m2s)\n`), "it's slow");
  assert.equal(unfinishedTest(`${slow} ok (1m2s)\nit's slow ... ok (1m2s)\n`), undefined);
  assert.equal(
    unfinishedTest("a run's ...'a run's' has been running for over (1m0s)\n"),
    "a run's",
  );
});

Deno.test("a file's failures are named one per line, file › test, before the totals", async () => {
  const runDir = await Deno.makeTempDir({ prefix: "pgflow-runner-test-" });
  await Deno.chmod(runDir, 0o755);
  try {
    const result = await runTestFile(FAILS, { flags: [], env: {}, runDir });
    assert.equal(result.passed, 1);
    assert.equal(result.failed, 2);
    assert.deepEqual(result.failures, [
      `${FAILS} › fails => plainly`,
      `${FAILS} › fails in a step > the bad step`,
    ]);
    assert.equal(
      summaryLines({ ...result, failures: result.failures }),
      `FAILED ${FAILS} › fails => plainly\nFAILED ${FAILS} › fails in a step > the bad step\n` +
        "1 passed, 2 failed",
    );
  } finally {
    await Deno.remove(runDir, { recursive: true });
  }
});

Deno.test("a file over its bound fails naming the test, and nothing it started is left", async () => {
  const runDir = await Deno.makeTempDir({ prefix: "pgflow-runner-test-" });
  await Deno.chmod(runDir, 0o755);
  try {
    // The stand-in server is up at once: the bound is overrun by the hang, however busy the
    // machine (a real Postgres's initdb alone can take longer than a short bound there).
    const result = await runTestFile(HANG, {
      flags: [],
      env: { PGFLOW_FIXTURE_SERVER: "stand-in" },
      runDir,
      timeoutSeconds: 20,
    });
    assert.equal(result.timedOutAfterS, 20);
    assert.equal(result.failed, 1);
    assert.deepEqual(result.failures, [
      `${HANG} › starts a server and hangs > the stuck step (still running after 20 s: killed)`,
    ]);
    assert.match(
      result.problems[0],
      /^TIMEOUT .*hang\.ts: "starts a server and hangs > the stuck step" was still running after 20 s/,
    );
    // What its processes were doing (its own `deno test`: state, kernel wait) and its last output.
    assert.match(result.problems[0], /\n {2}pid \d+ [RSD] \S+ \(\d+ threads\): \S*deno test /);
    assert.match(result.problems[0], /output \(last lines\):\n[^]*the stuck step \.\.\./);
    const s = started(result.output);
    assert.ok(await gone(s), `nothing is left running: ${JSON.stringify(s)}`);
  } finally {
    await Deno.remove(runDir, { recursive: true });
  }
});

Deno.test("a file that leaves processes running fails naming them", async () => {
  const runDir = await Deno.makeTempDir({ prefix: "pgflow-runner-test-" });
  await Deno.chmod(runDir, 0o755);
  try {
    const result = await runTestFile(LEAK, { flags: [], env: {}, runDir });
    assert.equal(result.passed, 1);
    assert.equal(result.failed, 1, result.problems.join("\n"));
    assert.deepEqual(result.failures, [`${LEAK} › (left processes running)`]);
    const s = started(result.output);
    assert.match(result.problems.join("\n"), new RegExp(`LEFT RUNNING .*leak\\.ts`));
    assert.match(result.problems.join("\n"), new RegExp(`pid ${s.sleeper}: \\S*sleep 600`));
    assert.match(result.problems.join("\n"), /without stopping the throw-away Postgres/);
    assert.ok(await gone(s), `nothing is left running: ${JSON.stringify(s)}`);
  } finally {
    await Deno.remove(runDir, { recursive: true });
  }
});

for (const signal of ["SIGTERM", "SIGKILL"] as const) {
  Deno.test(`a runner stopped by ${signal} leaves nothing running`, async () => {
    // The watchdogs' notes go to this test's file: the runner counts notes in its own as leaks.
    const notes = await Deno.makeTempFile({ prefix: "pgflow-watchdog-log-" });
    const runner = new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", new URL("./run_tests.ts", import.meta.url).pathname, HANG],
      env: { NO_COLOR: "1", DATABASE_URL: "", PGFLOW_WATCHDOG_LOG: notes },
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    let out = "";
    const stderr = new Response(runner.stderr).text();
    const reading = (async () => {
      for await (const chunk of runner.stdout.pipeThrough(new TextDecoderStream())) out += chunk;
    })();
    let s: Started;
    try {
      // The runner provisions, starts its server and type-checks before the file runs.
      await waitFor(() => out.includes("STARTED"), {
        timeoutMs: 300_000,
        what: "the runner's file to start its server",
      });
      s = started(out);
    } finally {
      runner.kill(signal);
    }
    const status = await runner.status;
    await reading;
    const err = await stderr;
    // A watchdog writes its note last, once its stop is done: with the runner killed, the notes
    // (not the processes being gone) say the watchdogs finished. A watchdog gives up after ~25 s.
    const expectedNotes = signal === "SIGKILL"
      ? [
        /without stopping the test processes of .*hang\.ts/,
        /without stopping the throw-away Postgres/,
      ]
      : [];
    let noted = "";
    await waitFor(
      async () => {
        noted = await Deno.readTextFile(notes);
        return expectedNotes.every((re) => re.test(noted)) && await gone(s);
      },
      {
        timeoutMs: 60_000,
        what: `what the file started to be stopped (${JSON.stringify(s)})` +
          (expectedNotes.length > 0 ? ` and the watchdogs' notes ${expectedNotes.join(", ")}` : ""),
      },
    );
    await Deno.remove(notes);
    if (signal === "SIGTERM") {
      assert.equal(status.code, 143, `${out}\n${err}`);
      assert.match(err, /SIGTERM: stopping the test files/);
      assert.match(out, /KILLED .*hang\.ts: SIGKILL ended it before it finished/);
      // The last lines name both failures, then the totals.
      assert.match(
        out,
        /^FAILED \S*hang\.ts › \(killed by SIGKILL before it finished\)\nFAILED the run, stopped by SIGTERM\n0 passed, 2 failed$/m,
      );
    } else {
      // Nothing of the runner ran: its watchdogs stopped the file, its server and its folder.
      assert.match(noted, /without stopping the test processes of .*hang\.ts/);
      assert.match(noted, /without stopping the throw-away Postgres/);
    }
  });
}
