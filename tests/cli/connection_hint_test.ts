/**
 * A wrong database URL is explained the same way by the CLI, the worker and the client: the
 * target, what went wrong, what to check and the command that starts a local database, and,
 * since it is a setting to fix rather than a bug, without a stack, also when a program does not
 * catch it.
 */
import assert from "node:assert/strict";
import {
  createClient,
  createLogger,
  createWorker,
  DatabaseConnectionError,
  Flow,
  StartFlowError,
} from "../../mod.ts";
import { WorkerStartupError } from "../../src/worker/errors.ts";
import { runCli, shown } from "./helpers.ts";

const REFUSED = "postgres://postgres:s3cret@127.0.0.1:1/postgres";
const UNKNOWN_HOST = "postgres://postgres@no-such-host.invalid:5432/postgres";
/** The hint every entry point gives for a refused connection (the jsr: form outside the repo). */
const REFUSED_HINT =
  /could not connect to 127\.0\.0\.1:1: connection refused \(ECONNREFUSED\)\. Is the database running there\? For the local database run `deno run -A jsr:@pgflow\/shared@\d+\.\d+\.\d+\/cli db start`; otherwise check the URL \(postgres:\/\/postgres:\*\*\*@127\.0\.0\.1:1\/postgres\)/;

const flow = new Flow<{ n: number }>({ slug: "hint_v1" }).step({ slug: "s" }, (i) => i.n);

/** Whether a stack holds frames (lines starting "at "). */
const hasFrames = (stack: string | undefined) => /^\s+at /m.test(stack ?? "");

Deno.test("the CLI, the worker and the client give the same hint for a refused connection", async () => {
  const elsewhere = await Deno.makeTempDir();
  try {
    const cli = await runCli(["status", "--database-url", REFUSED], { cwd: elsewhere });
    assert.equal(cli.code, 1, shown(cli));
    assert.match(cli.stderr, REFUSED_HINT);
  } finally {
    await Deno.remove(elsewhere, { recursive: true });
  }

  const worker = createWorker(flow, {
    connectionString: REFUSED,
    logger: createLogger({ sink: () => {} }),
  });
  await assert.rejects(worker.start(), (e: unknown) => {
    assert.ok(e instanceof WorkerStartupError);
    assert.match(e.message, /^worker for queue "hint_v1" could not start: /);
    assert.match(e.message, REFUSED_HINT);
    assert.doesNotMatch(e.message, /s3cret/);
    assert.ok(!hasFrames(e.stack), `no stack: ${e.stack}`);
    return true;
  });

  const client = createClient({ connectionString: REFUSED });
  try {
    await assert.rejects(client.startFlow(flow, { n: 1 }), (e: unknown) => {
      assert.ok(e instanceof StartFlowError);
      assert.equal(e.code, "ECONNREFUSED");
      assert.match(e.message, /^cannot start flow hint_v1: /);
      assert.match(e.message, REFUSED_HINT);
      assert.ok(!hasFrames(e.stack), `no stack: ${e.stack}`);
      return true;
    });
    await assert.rejects(client.listRuns(), (e: unknown) => {
      assert.ok(e instanceof DatabaseConnectionError);
      assert.equal(e.code, "ECONNREFUSED");
      assert.match(e.message, REFUSED_HINT);
      assert.ok(!hasFrames(e.stack), `no stack: ${e.stack}`);
      return true;
    });
    await assert.rejects(
      client.getRun(crypto.randomUUID()),
      (e: unknown) => e instanceof DatabaseConnectionError && REFUSED_HINT.test(e.message),
    );
  } finally {
    await client.close();
  }
});

Deno.test("an unknown host is named, with the URL to check", async () => {
  const client = createClient({ connectionString: UNKNOWN_HOST });
  try {
    await assert.rejects(client.listRuns(), (e: unknown) => {
      assert.ok(e instanceof DatabaseConnectionError, String(e));
      assert.match(
        e.message,
        /could not connect: host no-such-host\.invalid not found \((ENOTFOUND|EAI_AGAIN)\); check the URL \(postgres:\/\/postgres@no-such-host\.invalid:5432\/postgres\)/,
      );
      return true;
    });
  } finally {
    await client.close();
  }
});

Deno.test("a program that does not catch it prints the hint, not a stack", async () => {
  const script = await Deno.makeTempFile({ suffix: ".ts" });
  const mod = new URL("../../mod.ts", import.meta.url).href;
  try {
    for (
      const body of [
        `const c = createClient({ connectionString: "${REFUSED}" });\nawait c.startFlow(flow, { n: 1 });`,
        `await EdgeWorker.start(flow, { connectionString: "${REFUSED}" });`,
      ]
    ) {
      await Deno.writeTextFile(
        script,
        `import { createClient, EdgeWorker, Flow } from "${mod}";\n` +
          `const flow = new Flow<{ n: number }>({ slug: "hint_v1" }).step({ slug: "s" }, (i) => i.n);\n` +
          `${body}\n`,
      );
      const out = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "--no-lock", script],
        env: { NO_COLOR: "1" },
        stdout: "piped",
        stderr: "piped",
      }).output();
      const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
      assert.equal(out.code, 1, text);
      assert.match(text, REFUSED_HINT);
      assert.ok(!hasFrames(text), `frames printed:\n${text}`);
    }
  } finally {
    await Deno.remove(script);
  }
});
