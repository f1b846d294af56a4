/** Config and target validation: every bad option fails at creation with a clear error. */
import assert from "node:assert/strict";
import {
  createWorker,
  EdgeWorker,
  Flow,
  type FlowWorker,
  routeFlow,
  withStepQueues,
  WorkerConfigError,
  type WorkerTarget,
} from "../../mod.ts";
import { WORKER_OPTIONS } from "../../src/worker/options.ts";

const URL_ = "postgres://postgres@127.0.0.1:1/none";
const flow = new Flow<{ id: string }>({ slug: "cfg_flow" })
  .step({ slug: "a" }, (i) => i.id)
  .step({ slug: "b", dependsOn: ["a"] }, (d) => d.a);
const routed = routeFlow(flow, { queues: { a: "cfg_work", b: "cfg_slack" } });

const loose = createWorker as (t: WorkerTarget, c: Record<string, unknown>) => FlowWorker;

const bad: [string, WorkerTarget, Record<string, unknown>, RegExp][] = [
  [
    "maxConcurrent 0",
    flow,
    { maxConcurrent: 0 },
    /maxConcurrent must be an integer from 1 to 1000, got 0/,
  ],
  ["batchSize 1.5", flow, { batchSize: 1.5 }, /batchSize must be an integer .* got 1\.5/],
  ["visibilityTimeout string", flow, { visibilityTimeout: "5" }, /visibilityTimeout .* got "5"/],
  ["maxPollSeconds 0", flow, { maxPollSeconds: 0 }, /maxPollSeconds must be an integer from 1/],
  [
    "pollIntervalMs too big",
    flow,
    { maxPollSeconds: 1, pollIntervalMs: 2000 },
    /pollIntervalMs \(2000\) must not exceed/,
  ],
  [
    "maxPgConnections 1",
    flow,
    { maxPgConnections: 1 },
    /maxPgConnections must be an integer from 2/,
  ],
  ["unknown option", flow, { maxConcurent: 3 }, /unknown worker option "maxConcurent"/],
  [
    "preparedStatements",
    flow,
    { preparedStatements: true },
    /preparedStatements must be "auto", "on" or "off", got true/,
  ],
  [
    "logErrorMessages",
    flow,
    { logErrorMessages: "yes" },
    /logErrorMessages must be true or false, got "yes"/,
  ],
  ["sql and connectionString", flow, { sql: () => {} }, /either sql .* or connectionString/],
  [
    "a URL given as sql: named by its type, never printed",
    flow,
    { sql: "postgres://u:hunter2@db/x", connectionString: undefined },
    /^sql must be a postgres\.js pool \(made with createPool\), got a string \(a URL goes in connectionString\)$/,
  ],
  ["bad scheme", flow, { connectionString: "mysql://x" }, /postgres:\/\/ or postgresql:\/\//],
  ["functionName", flow, { functionName: "bad name!" }, /functionName must be/],
  ["workerId", flow, { workerId: "w1" }, /workerId must be a UUID, got "w1"/],
  [
    "queueName on a plain flow",
    flow,
    { queueName: "cfg_work" },
    /plain flow and always polls its own queue/,
  ],
  ["missing queueName", [routed], {}, /queueName is missing: .*"cfg_work", "cfg_slack"/],
  ["queueName outside the routes", [routed], { queueName: "other" }, /"other" is not a route/],
  [
    "stepSlug on routed flows",
    [routed],
    { queueName: "cfg_work", stepSlug: "a" },
    /stepSlug is for withStepQueues/,
  ],
  [
    "missing stepSlug",
    withStepQueues(flow),
    {},
    /stepSlug is missing: flow "cfg_flow" has steps "a", "b"/,
  ],
  ["unknown stepSlug", withStepQueues(flow), { stepSlug: "c" }, /stepSlug "c" is not a step/],
  [
    "duplicate slugs",
    [routed, routed],
    { queueName: "cfg_work" },
    /flow slug "cfg_flow" is supplied twice/,
  ],
  ["empty list", [], { queueName: "x" }, /list of routed flows is empty/],
  [
    "not a routed flow",
    [flow as never],
    { queueName: "x" },
    /item 0 of the list is not a routed flow/,
  ],
];

for (const [name, target, config, message] of bad) {
  Deno.test(`config: ${name}`, () => {
    assert.throws(() => loose(target, { connectionString: URL_, ...config }), (error: unknown) => {
      assert.ok(error instanceof WorkerConfigError, `${error}`);
      assert.match((error as Error).message, message);
      return true;
    });
  });
}

Deno.test("config: case-insensitive duplicate slugs", () => {
  const upper = new Flow<{ id: string }>({ slug: "CFG_flow" }).step({ slug: "a" }, (i) => i.id);
  assert.throws(
    () =>
      loose([routed, routeFlow(upper, { queues: { a: "cfg_work" } })], {
        connectionString: URL_,
        queueName: "cfg_work",
      }),
    /"CFG_flow" is supplied twice \(as "cfg_flow"\)/,
  );
});

Deno.test("config: the database comes from the config, else EDGE_WORKER_DB_URL, else DATABASE_URL", () => {
  assert.throws(() => loose(flow, { env: {} }), /no database: set connectionString or sql/);
  assert.equal(loose(flow, { env: { DATABASE_URL: URL_ } }).state, "created");
  assert.equal(loose(flow, { env: { EDGE_WORKER_DB_URL: URL_ } }).state, "created");
  assert.throws(
    () => loose(flow, { env: { DATABASE_URL: URL_, EDGE_WORKER_LOG_LEVEL: "loud" } }),
    /EDGE_WORKER_LOG_LEVEL must be error, warn, info or debug, got "loud"/,
  );
});

Deno.test("config: selection picks the queue; defaults are sane", () => {
  assert.equal(loose(flow, { connectionString: URL_ }).queueName, "cfg_flow");
  assert.equal(
    loose(withStepQueues(flow), { connectionString: URL_, stepSlug: "b" }).queueName,
    "cfg_flow__b",
  );
  const worker = loose([routed], { connectionString: URL_, queueName: "cfg_slack" });
  assert.equal(worker.queueName, "cfg_slack");
  assert.equal(worker.functionName, "cfg_slack");
  assert.match(worker.id, /^[0-9a-f-]{36}$/);
  const id = crypto.randomUUID();
  assert.equal(loose(flow, { connectionString: URL_, env: { SB_EXECUTION_ID: id } }).id, id);
});

Deno.test("EdgeWorker.start may be called once per process", async () => {
  // A config error still counts as the one start, and needs no database or signal handlers.
  await assert.rejects(
    (EdgeWorker.start as (t: WorkerTarget, c: object) => Promise<void>)(flow, {
      maxConcurrent: -1,
    }),
    WorkerConfigError,
  );
  await assert.rejects(EdgeWorker.start(flow), /already called in this process/);
});

Deno.test("types: queueName autocompletes from routes; stepSlug on a plain flow is an error", () => {
  const check = () => {
    createWorker([routed], { queueName: "cfg_work" });
    // @ts-expect-error a queue outside the routes
    createWorker([routed], { queueName: "nope" });
    // @ts-expect-error a plain flow takes no stepSlug
    createWorker(flow, { stepSlug: "a" });
    createWorker(withStepQueues(flow), { stepSlug: "b" });
    // @ts-expect-error routed flows need queueName
    createWorker([routed]);
  };
  assert.equal(typeof check, "function");
});

Deno.test("every numeric option accepts exactly its range from the one options table", () => {
  for (const [key, option] of Object.entries(WORKER_OPTIONS)) {
    // pollIntervalMs may not exceed maxPollSeconds × 1000: give the read room.
    const room = key === "pollIntervalMs" ? { maxPollSeconds: 60 } : {};
    const start = (value: number) =>
      loose(flow, { connectionString: URL_, ...room, [key]: value }).queueName;
    for (const ok of [option.min, option.max]) assert.equal(start(ok), "cfg_flow", `${key} ${ok}`);
    for (const out of [option.min - 1, option.max + 1]) {
      assert.throws(
        () => start(out),
        new RegExp(`${key} must be an integer from ${option.min} to ${option.max}, got ${out}`),
      );
    }
  }
});

Deno.test("EdgeWorkerConfig's docs state the defaults of the options table", () => {
  const source = Deno.readTextFileSync(new URL("../../src/worker/config.ts", import.meta.url));
  for (const [key, option] of Object.entries(WORKER_OPTIONS)) {
    const doc = new RegExp(`/\\*\\*((?:(?!\\*/)[\\s\\S])*)\\*/\\s*readonly ${key}\\?:`).exec(
      source,
    );
    assert.ok(doc, `${key} is documented in EdgeWorkerConfig`);
    const stated = /default (\d[\d_,]*)/i.exec(doc[1].replace(/\s+\*\s*/g, " "));
    assert.ok(stated, `${key}'s doc states its default`);
    assert.equal(Number(stated[1].replace(/[_,]/g, "")), option.default, `${key}'s default`);
  }
});

Deno.test("config: a worker that may not read the environment says so, naming --allow-env", async () => {
  const dir = await Deno.makeTempDir();
  const script = `${dir}/worker.ts`;
  await Deno.writeTextFile(
    script,
    `import { createWorker, Flow } from ${
      JSON.stringify(new URL("../../mod.ts", import.meta.url).href)
    };
const flow = new Flow({ slug: "cfg_env" }).step({ slug: "a" }, () => 1);
try {
  createWorker(flow);
  console.log("created");
} catch (error) {
  console.log((error as Error).message);
}`,
  );
  const run = async (...permissions: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "--no-prompt", "--allow-read", "--allow-net", ...permissions, script],
      env: { DATABASE_URL: URL_, NO_COLOR: "1" },
      stdout: "piped",
      stderr: "piped",
    }).output();
    return new TextDecoder().decode(out.stdout).trim();
  };
  try {
    assert.match(
      await run(),
      /^no database: this process may not read EDGE_WORKER_DB_URL or DATABASE_URL \(Deno's --allow-env is missing\): run it with --allow-env/,
    );
    // Allowed for the names the worker reads, not the whole environment: it reads them.
    assert.equal(await run("--allow-env=DATABASE_URL,EDGE_WORKER_DB_URL"), "created");
    assert.equal(await run("--allow-env"), "created");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
