/**
 * The worker's database URL, from `connectionString`, `EDGE_WORKER_DB_URL` or `DATABASE_URL`:
 * each malformed one fails at once, naming where it came from and the part that is wrong, and no
 * error or log line (nor an EdgeWorker process's output) shows the password.
 */
import assert from "node:assert/strict";
import { createWorker, Flow, type FlowWorker, WorkerConfigError } from "../../mod.ts";
import { createLogger, type LogRecord } from "../../src/platform/logger.ts";
import { BAD_URLS, SECRET } from "../platform/bad_urls.ts";
import { spawnDeno } from "../e2e/process.ts";

const flow = new Flow<{ n: number }>({ slug: "url_flow" }).step({ slug: "a" }, (i) => i.n);
const loose = createWorker as (t: unknown, c: Record<string, unknown>) => FlowWorker;

Deno.test("createWorker refuses each malformed URL from each source at once", () => {
  const sources: [string, (url: string) => Record<string, unknown>][] = [
    ["connectionString", (url) => ({ connectionString: url, env: {} })],
    ["EDGE_WORKER_DB_URL", (url) => ({ env: { EDGE_WORKER_DB_URL: url, DATABASE_URL: "x" } })],
    ["DATABASE_URL", (url) => ({ env: { DATABASE_URL: url } })],
  ];
  for (const bad of BAD_URLS) {
    for (const [source, config] of sources) {
      // A synchronous throw: nothing was awaited, so no connection was tried.
      assert.throws(() => loose(flow, config(bad.url)), (error: unknown) => {
        const what = `${bad.kind} in ${source}: ${error}`;
        assert.ok(error instanceof WorkerConfigError, what);
        assert.ok(error.message.startsWith(`${source} `), what);
        assert.match(error.message, bad.says, what);
        assert.doesNotMatch(`${error.message}\n${error.stack}`, SECRET, what);
        return true;
      });
    }
  }
});

Deno.test("a worker that fails to connect logs no password", async () => {
  const records: LogRecord[] = [];
  const logger = createLogger({ level: "debug", sink: (r) => records.push(r) });
  const worker = loose(flow, {
    connectionString: "postgres://app:s3cret-pw@127.0.0.1:1/postgres",
    logger,
    env: {},
  });
  await assert.rejects(worker.start(), (error: Error) => {
    assert.doesNotMatch(`${error.message}\n${error.stack}`, SECRET);
    return true;
  });
  const text = JSON.stringify(records);
  assert.match(text, /worker failed to start/);
  assert.doesNotMatch(text, SECRET);
});

Deno.test("EdgeWorker.start with each malformed DATABASE_URL: one masked line, exit 1", async () => {
  const script = new URL("../e2e/fixtures/plain_worker.ts", import.meta.url).pathname;
  // A few processes at a time: the machine is small.
  for (let i = 0; i < BAD_URLS.length; i += 4) {
    await Promise.all(
      BAD_URLS.slice(i, i + 4).map(async (bad) => {
        const started = performance.now();
        const child = spawnDeno(script, {
          DATABASE_URL: bad.url,
          EDGE_WORKER_DB_URL: "",
          PGFLOW_AUTH_SECRET: "",
          SUPABASE_SERVICE_ROLE_KEY: "",
        });
        const status = await child.exited;
        const seconds = (performance.now() - started) / 1000;
        const output = child.output();
        const what = `${bad.kind} (${seconds.toFixed(1)} s):\n${output}`;
        assert.equal(status.code, 1, what);
        const lines = output.trim().split("\n");
        assert.equal(lines.length, 1, `one line: ${what}`);
        const line = JSON.parse(lines[0]);
        assert.equal(line.event, "worker failed to start", what);
        assert.match(line.error, /^DATABASE_URL /, what);
        assert.match(line.error, bad.says, what);
        assert.doesNotMatch(output, SECRET, what);
        assert.doesNotMatch(output, /Uncaught| {4}at |\.ts:\d+:\d+/, `no stack trace: ${what}`);
        // Deno's own start-up is in this, four at once on a machine that may be busy: only a
        // hang or a retry loop takes a minute (the answer itself is immediate: the test above).
        assert.ok(seconds < 60, what);
      }),
    );
  }
});
