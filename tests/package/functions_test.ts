/**
 * The example functions deploy as `supabase functions deploy` bundles them: one folder per
 * function (`index.ts` + its own `deno.json`), shared code in `_shared/`, a `[functions.<name>]`
 * table in `supabase/config.toml`, and nothing imported from outside `supabase/functions/` except
 * through the function's import map. Each type-checks and runs with its own config, under an
 * `EdgeRuntime` shim (the Edge path of `EdgeWorker.start`: HTTP trigger, `waitUntil`, the
 * isolate's `beforeunload`), from a directory outside the repository.
 */
import assert from "node:assert/strict";
import { pathToFileURL } from "node:url";
import { testDatabase, waitFor } from "../support/db.ts";
import { startRun, waitForRun } from "../worker/helpers.ts";
import { freePort } from "../e2e/process.ts";
import {
  assertSucceeded,
  deno,
  edges,
  moduleGraph,
  REPO_ROOT,
  type RunningDeno,
  spawnDeno,
} from "./deno_cmd.ts";
import { parseToml } from "./toml.ts";

const db = testDatabase(import.meta.url);
const FUNCTIONS_DIR = `${REPO_ROOT}supabase/functions/`;
const FUNCTIONS_URL = pathToFileURL(FUNCTIONS_DIR).href;
const SECRET = "functions-test-secret";

interface RootConfig {
  name: string;
  version: string;
}
const root = JSON.parse(await Deno.readTextFile(`${REPO_ROOT}deno.json`)) as RootConfig;

/** The function folders: every directory of supabase/functions/ not starting with `_` or `.`. */
async function functionNames(): Promise<string[]> {
  const names: string[] = [];
  for await (const entry of Deno.readDir(FUNCTIONS_DIR)) {
    if (entry.isDirectory && !/^[_.]/.test(entry.name)) names.push(entry.name);
  }
  return names.sort();
}

interface FunctionConfig {
  imports: Record<string, string>;
  links?: string[];
}

async function functionConfig(name: string): Promise<FunctionConfig> {
  return JSON.parse(await Deno.readTextFile(`${FUNCTIONS_DIR}${name}/deno.json`));
}

const names = await functionNames();

Deno.test("each function folder is laid out as supabase functions new makes it", async () => {
  assert.ok(names.includes("thread_processing") && names.includes("slack_delivery"), `${names}`);
  const config = parseToml(await Deno.readTextFile(`${REPO_ROOT}supabase/config.toml`));
  const declared = [...config.keys()].filter((t) => t.startsWith("functions.")).map((t) =>
    t.slice("functions.".length)
  ).sort();
  assert.deepEqual(declared, names, "config.toml must have one [functions.<name>] per folder");
  // The user's import line: the published module, at this package's version.
  const [major, minor] = root.version.split(".");
  const published = `jsr:${root.name}@^${major === "0" ? `0.${minor}.0` : `${major}.0.0`}`;
  assert.equal(root.name, "@pgflow/shared");
  for (const name of names) {
    for (const file of ["index.ts", "deno.json"]) {
      await Deno.stat(`${FUNCTIONS_DIR}${name}/${file}`);
    }
    const table = config.get(`functions.${name}`)!;
    assert.equal(table.get("import_map"), `./functions/${name}/deno.json`, name);
    assert.equal(table.get("entrypoint"), `./functions/${name}/index.ts`, name);
    assert.equal(
      table.get("verify_jwt"),
      false,
      `${name}: the worker checks its own bearer token (PGFLOW_AUTH_SECRET), which the ` +
        `keep-alive sends and which need not be a JWT; set verify_jwt = false`,
    );
    const own = await functionConfig(name);
    assert.deepEqual(Object.keys(own.imports), ["@pgflow/shared"], name);
    assert.equal(own.imports["@pgflow/shared"], published, name);
    // The local override points at this checkout, the package the import names.
    assert.deepEqual(own.links, ["../../.."], name);
    assert.equal(
      new URL(`${own.links![0]}/`, pathToFileURL(`${FUNCTIONS_DIR}${name}/`)).pathname,
      REPO_ROOT,
    );
  }
  // Shared code is not a function: no entry point, no config of its own.
  await assert.rejects(Deno.stat(`${FUNCTIONS_DIR}_shared/index.ts`));
  await assert.rejects(Deno.stat(`${FUNCTIONS_DIR}_shared/deno.json`));
});

for (const name of names) {
  Deno.test(`${name}: imports nothing outside supabase/functions/ except through its import map`, async () => {
    const configPath = `${FUNCTIONS_DIR}${name}/deno.json`;
    const mapped = Object.keys((await functionConfig(name)).imports);
    const cwd = await Deno.makeTempDir({ prefix: "pgflow_fn_" });
    try {
      const graph = await moduleGraph(
        `${FUNCTIONS_DIR}${name}/index.ts`,
        ["--config", configPath],
        cwd,
      );
      for (const module of graph.modules) {
        assert.equal(module.error, undefined, `${module.specifier} does not load`);
      }
      const all = edges(graph);
      assert.ok(all.length > 0);
      for (const edge of all) {
        assert.ok(
          !edge.to.startsWith("error:"),
          `${edge.from} imports ${edge.written}: ${edge.to}`,
        );
        if (!edge.from.startsWith(FUNCTIONS_URL)) continue;
        const outside = edge.to.startsWith("file:") && !edge.to.startsWith(FUNCTIONS_URL);
        const viaMap = mapped.some((key) =>
          key.endsWith("/") ? edge.written.startsWith(key) : edge.written === key
        );
        assert.ok(
          !outside || viaMap,
          `${edge.from.slice(FUNCTIONS_URL.length)} imports "${edge.written}" (${edge.to}), ` +
            `outside supabase/functions/; deploy bundles only the function's folder and its ` +
            `import map: import it through an entry of ${configPath}`,
        );
      }
      // What the map reaches in this checkout is the package itself: mod.ts (with dsl.ts) and src/.
      for (const module of graph.modules) {
        if (!module.specifier.startsWith("file:") || module.specifier.startsWith(FUNCTIONS_URL)) {
          continue;
        }
        const path = new URL(module.specifier).pathname.slice(REPO_ROOT.length);
        assert.match(
          path,
          /^(mod\.ts|dsl\.ts|src\/)/,
          `${module.specifier} is not part of the package`,
        );
      }
    } finally {
      await Deno.remove(cwd, { recursive: true });
    }
  });

  Deno.test(`${name}: type-checks with its own deno.json`, async () => {
    const cwd = await Deno.makeTempDir({ prefix: "pgflow_fn_" });
    try {
      const result = await deno([
        "check",
        "--no-lock",
        "--config",
        `${FUNCTIONS_DIR}${name}/deno.json`,
        `${FUNCTIONS_DIR}${name}/index.ts`,
      ], { cwd });
      assertSucceeded(`deno check ${name}`, result);
    } finally {
      await Deno.remove(cwd, { recursive: true });
    }
  });
}

/**
 * The Supabase Edge runtime, as far as `EdgeWorker.start` uses it: the `EdgeRuntime` global with
 * `waitUntil`, `Deno.serve` (the platform routes requests to it; here: 127.0.0.1:$PORT), and the
 * end of the isolate, which dispatches `beforeunload` and waits for `waitUntil` promises (here on
 * SIGTERM).
 */
const EDGE_RUNTIME_SHIM = `
const pending = new Set<Promise<unknown>>();
(globalThis as { EdgeRuntime?: unknown }).EdgeRuntime = {
  waitUntil(promise: Promise<unknown>) {
    pending.add(promise);
    promise.then(() => pending.delete(promise), () => pending.delete(promise));
  },
};
const serve = Deno.serve;
(Deno as unknown as { serve: unknown }).serve = (handler: Deno.ServeHandler) =>
  serve({ hostname: "127.0.0.1", port: Number(Deno.env.get("PORT")), onListen() {} }, handler);
Deno.addSignalListener("SIGTERM", async () => {
  globalThis.dispatchEvent(new Event("beforeunload"));
  await Promise.allSettled([...pending]);
  Deno.exit(0);
});
`;

async function request(port: number, name: string, token?: string): Promise<Response> {
  return await fetch(`http://127.0.0.1:${port}/${name}`, {
    method: "POST",
    headers: token === undefined ? {} : { authorization: `Bearer ${token}` },
  });
}

db.test("both functions run with their own deno.json under the Edge runtime and finish a run", async ({ sql, url }) => {
  const cwd = await Deno.makeTempDir({ prefix: "pgflow_fn_" });
  await Deno.writeTextFile(`${cwd}/edge_runtime_shim.ts`, EDGE_RUNTIME_SHIM);
  const running: { name: string; port: number; child: RunningDeno }[] = [];
  try {
    for (const name of names) {
      const port = freePort();
      const child = spawnDeno([
        "run",
        "-A",
        "--no-lock",
        "--config",
        `${FUNCTIONS_DIR}${name}/deno.json`,
        "--preload",
        `${cwd}/edge_runtime_shim.ts`,
        `${FUNCTIONS_DIR}${name}/index.ts`,
      ], {
        cwd,
        env: {
          DATABASE_URL: url,
          PORT: String(port),
          PGFLOW_AUTH_SECRET: SECRET,
          SB_EXECUTION_ID: crypto.randomUUID(),
        },
      });
      running.push({ name, port, child });
    }
    for (const fn of running) {
      // Served, but nothing runs before an authorised request.
      const denied = await waitFor(async () => {
        try {
          return await request(fn.port, fn.name);
        } catch {
          return undefined;
        }
      }, { what: `${fn.name} to listen; output:\n${fn.child.output()}`, timeoutMs: 60_000 });
      assert.equal(denied.status, 401);
      await denied.body?.cancel();
    }
    assert.equal((await sql`select 1 from pgflow.workers`).length, 0);

    for (const fn of running) {
      const response = await request(fn.port, fn.name, SECRET);
      const body = await response.json();
      assert.equal(response.status, 200, `${JSON.stringify(body)}\n${fn.child.output()}`);
      assert.equal(body.status, "started");
    }
    const workers = await sql<{ queue_name: string; function_name: string }[]>`
      select queue_name, function_name from pgflow.workers order by queue_name`;
    assert.deepEqual(
      workers.map((w) => [w.queue_name, w.function_name]),
      names.map((n) => [n, n]),
    );

    const run = await startRun(sql, "thread_triage_v2", { threadId: "t9", text: "site is down" });
    assert.deepEqual(await waitForRun(sql, run), {
      status: "completed",
      output: { deliverSlack: { delivered: false, text: "[P1] thread t9" } },
    });

    // The isolate ends: beforeunload stops the worker, waitUntil holds the isolate until it has.
    for (const fn of running) fn.child.process.kill("SIGTERM");
    for (const fn of running) {
      assert.equal((await fn.child.exited).code, 0, fn.child.output());
    }
    assert.equal((await sql`select 1 from pgflow.workers where stopped_at is null`).length, 0);
    // Running from its own config wrote nothing into the function folders (no deno.lock).
    for (const name of names) {
      const files = [];
      for await (const entry of Deno.readDir(`${FUNCTIONS_DIR}${name}`)) files.push(entry.name);
      assert.deepEqual(files.sort(), ["deno.json", "index.ts"], name);
    }
  } finally {
    for (const fn of running) {
      try {
        fn.child.process.kill("SIGKILL");
      } catch {
        // Already exited.
      }
      await fn.child.process.status;
    }
    await Deno.remove(cwd, { recursive: true });
  }
});
