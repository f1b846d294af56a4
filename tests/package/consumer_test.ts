/**
 * The module is consumable as it is: a small app in a temporary directory outside this repository,
 * with no deno.json, import map or package.json of its own, imports `mod.ts` by file URL (as it
 * would import `jsr:@pgflow/shared`), type-checks, and runs a flow to completion against the test
 * database. Everything it loads from this repository is part of the published package.
 */
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import { testDatabase } from "../support/db.ts";
import {
  assertSucceeded,
  deno,
  edges,
  moduleGraph,
  projectFileAbove,
  REPO_ROOT,
} from "./deno_cmd.ts";

const db = testDatabase(import.meta.url);
const MOD_URL = pathToFileURL(`${REPO_ROOT}mod.ts`).href;
const TOOLS_URL = pathToFileURL(`${REPO_ROOT}tools.ts`).href;

/** The consumer: a routed two-step flow, a worker, one run, its result on stdout as JSON. */
function consumerSource(modUrl: string): string {
  return `import { createPool, createWorker, Flow, routeFlow } from "${modUrl}";

const url = Deno.env.get("DATABASE_URL");
if (url === undefined) throw new Error("DATABASE_URL is not set");

const flow = new Flow<{ name: string }>({ slug: "consumer_greet_v1", maxAttempts: 2 })
  .step({ slug: "hello" }, (input) => ({ text: \`hello \${input.name}\` }))
  .array({ slug: "chars", dependsOn: ["hello"] }, (deps) => deps.hello.text.split(" "))
  .map({ slug: "lengths", array: "chars" }, (word) => word.length)
  .step({ slug: "shout", dependsOn: ["hello", "lengths"] }, (deps) => {
    const text: string = deps.hello.text;
    const total: number = deps.lengths.reduce((a, b) => a + b, 0);
    return { text: text.toUpperCase(), total };
  });

const routed = routeFlow(flow, {
  queues: { hello: "consumer_jobs", chars: "consumer_jobs", lengths: "consumer_jobs", shout: "consumer_jobs" },
});

// The types came through: these lines must fail to compile, or the check fails.
function typesAreReal() {
  // @ts-expect-error "elsewhere" is not among the routes
  createWorker(routed, { queueName: "elsewhere" });
  // @ts-expect-error a Date is not JSON
  new Flow<{ name: string }>({ slug: "bad" }).step({ slug: "when" }, () => new Date());
}
void typesAreReal;

const worker = createWorker(routed, {
  queueName: "consumer_jobs",
  connectionString: url,
  maxPollSeconds: 1,
  pollIntervalMs: 20,
});
const sql = createPool(url, { max: 1 });
try {
  await worker.start();
  const [{ run_id }] = await sql<{ run_id: string }[]>\`
    select run_id from pgflow.start_flow('consumer_greet_v1', '{"name": "ada lovelace"}'::jsonb)\`;
  const deadline = Date.now() + 30_000;
  for (;;) {
    const [run] = await sql<{ status: string; output: unknown }[]>\`
      select status, output from pgflow.runs where run_id = \${run_id}::uuid\`;
    if (run.status !== "started") {
      console.log("RESULT " + JSON.stringify({ status: run.status, output: run.output }));
      break;
    }
    if (Date.now() > deadline) throw new Error("the run did not finish within 30 s");
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
} finally {
  await worker.stop();
  await sql.end();
}
`;
}

async function consumerDir(source: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow_consumer_" });
  assert.ok(!dir.startsWith(REPO_ROOT), `${dir} is inside the repository`);
  const config = await projectFileAbove(dir);
  assert.equal(config, undefined, `a project file above the consumer would be used: ${config}`);
  await Deno.writeTextFile(`${dir}/main.ts`, source);
  return dir;
}

db.test("a consumer outside the repo imports mod.ts by URL, type-checks and runs a flow", async ({ sql, url }) => {
  const dir = await consumerDir(consumerSource(MOD_URL));
  try {
    assertSucceeded("deno check main.ts", await deno(["check", "main.ts"], { cwd: dir }));

    const run = await deno(["run", "-A", "main.ts"], { cwd: dir, env: { DATABASE_URL: url } });
    assertSucceeded("deno run main.ts", run);
    const line = run.stdout.split("\n").find((l) => l.startsWith("RESULT "));
    assert.ok(line !== undefined, `no result line in:\n${run.stdout}\n${run.stderr}`);
    const result = JSON.parse(line.slice("RESULT ".length));
    assert.deepEqual(result, {
      status: "completed",
      output: { shout: { text: "HELLO ADA LOVELACE", total: 16 } },
    });
    // It ran on the declared shared queue and stopped cleanly.
    const workers = await sql<{ queue_name: string; stopped: boolean }[]>`
      select queue_name, stopped_at is not null as stopped from pgflow.workers`;
    assert.deepEqual([...workers], [{ queue_name: "consumer_jobs", stopped: true }]);
    // Nothing had to be written next to it: no lockfile, no node_modules, no config.
    const files = [];
    for await (const entry of Deno.readDir(dir)) files.push(entry.name);
    assert.deepEqual(files, ["main.ts"]);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("everything the consumer loads from this repository is in the published package", async () => {
  // Both library entries: `@pgflow/shared` and `@pgflow/shared/tools`.
  const dir = await consumerDir(`export * from "${MOD_URL}";\nexport * from "${TOOLS_URL}";\n`);
  try {
    const graph = await moduleGraph("main.ts", [], dir);
    const published = await publishedFiles();
    const local = graph.modules.map((m) => m.specifier).filter((s) => s.startsWith("file:"));
    const fromRepo = local.filter((s) => s.startsWith(pathToFileURL(REPO_ROOT).href));
    assert.ok(fromRepo.length > 10, `expected the module's files, got ${fromRepo.join(", ")}`);
    for (const specifier of local) {
      if (specifier === pathToFileURL(`${dir}/main.ts`).href) continue;
      const path = new URL(specifier).pathname.slice(REPO_ROOT.length);
      assert.ok(published.has(path), `${path} is loaded by a consumer but not published`);
    }
    assert.ok(published.has("tools.ts"), "the tools entry is published");
    // Dependencies are pinned npm: specifiers, never bare names an import map would have to supply.
    for (const edge of edges(graph)) {
      assert.match(
        edge.to,
        /^(file|npm|node):/,
        `${edge.from} imports ${edge.written}, resolved to ${edge.to}`,
      );
      assert.ok(
        !/^[a-z@]/.test(edge.written) || /^(npm|node|jsr|file):/.test(edge.written),
        `${edge.from} imports the bare specifier "${edge.written}"; a consumer has no import ` +
          `map for it: import it as npm:<name>@<version>`,
      );
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

/** The repository paths `deno publish` would upload, read from its dry run. */
async function publishedFiles(): Promise<Set<string>> {
  const result = await deno(["publish", "--dry-run", "--allow-dirty"], { cwd: REPO_ROOT });
  assertSucceeded("deno publish --dry-run", result);
  const files = new Set<string>();
  for (const line of `${result.stdout}\n${result.stderr}`.split("\n")) {
    const match = /^\s+(\S+\.(?:ts|sql|md|json))\s/.exec(`${line} `);
    if (match !== null) files.add(match[1].replace(/^file:\/\/\//, "/").replace(REPO_ROOT, ""));
  }
  assert.ok(files.has("mod.ts"), `could not read the file list of the dry run:\n${result.stderr}`);
  return files;
}
