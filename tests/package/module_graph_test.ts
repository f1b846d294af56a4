/**
 * What each entry loads. The module a worker imports (`mod.ts`) loads no CLI or dashboard code;
 * `@pgflow/shared/dsl` loads the DSL and routing only (no postgres.js, no supabase-js, nothing of
 * the platform, the task path or the worker), so a flow definition is type-checked and
 * unit-tested without the runtime; and the benchmarks and local tooling reach the engine through
 * its entries, importing from `src/` only the tools they drive or measure.
 */
import assert from "node:assert/strict";
import { moduleGraph, REPO_ROOT } from "./deno_cmd.ts";
import { importsOf, tsFiles } from "../support/imports.ts";

/** The modules of `entry`'s graph (type-only imports included), repository files as paths. */
async function graphOf(entry: string): Promise<string[]> {
  const graph = await moduleGraph(entry, [], REPO_ROOT);
  const root = new URL(REPO_ROOT, "file://").href;
  return graph.modules.map((m) => m.specifier.replace(root, ""));
}

Deno.test("mod.ts, the module a worker imports, loads no CLI or dashboard code", async () => {
  const modules = await graphOf("mod.ts");
  assert.ok(modules.includes("src/task/run_tasks.ts"), "the graph was read");
  assert.deepEqual(modules.filter((m) => m.startsWith("src/cli/")), []);
});

/**
 * What loading `entry` evaluates: the modules reached through static imports of code, not through
 * `import()` or type-only imports. Repository files as paths, packages as written (`npm:…`).
 */
async function loadedWith(entry: string): Promise<Set<string>> {
  const graph = await moduleGraph(entry, [], REPO_ROOT);
  const root = new URL(REPO_ROOT, "file://").href;
  const byName = new Map(graph.modules.map((m) => [m.specifier, m]));
  const seen = new Set<string>();
  const queue = [...graph.roots];
  while (queue.length > 0) {
    const specifier = queue.pop()!;
    if (seen.has(specifier)) continue;
    seen.add(specifier);
    for (const dep of byName.get(specifier)?.dependencies ?? []) {
      const to = dep.code?.specifier;
      if (to !== undefined && dep.isDynamic !== true) queue.push(to);
    }
  }
  return new Set([...seen].map((s) => s.replace(root, "")));
}

Deno.test("a worker loads neither @opentelemetry/api nor supabase-js until it needs them", async () => {
  // Each is tens of milliseconds of a cold start; both are loaded by `import()` where an SDK is
  // registered (src/telemetry/otel_loader.ts) or SUPABASE_URL is set (supabase_client.ts).
  const loaded = [...await loadedWith("mod.ts")];
  assert.ok(loaded.includes("src/task/execute.ts"), "the graph was read");
  assert.ok(loaded.some((m) => m.startsWith("npm:") && m.includes("postgres")), String(loaded));
  assert.deepEqual(
    loaded.filter((m) =>
      /@opentelemetry\/api|@supabase\/supabase-js|^src\/telemetry\/attempts\.ts$|^src\/cli\//.test(
        m,
      )
    ),
    [],
  );
});

Deno.test("@pgflow/shared/dsl loads the DSL and routing only: no postgres.js, no supabase-js", async () => {
  const modules = await graphOf("dsl.ts");
  assert.ok(modules.includes("src/dsl/flow.ts"), "the graph was read");
  const outside = modules.filter((m) => m !== "dsl.ts" && !/^src\/(dsl|routing|util)\//.test(m));
  assert.deepEqual(outside, [], "dsl.ts loads nothing but src/dsl/, src/routing/, src/util/");
});

Deno.test("@pgflow/shared/testing loads no worker or CLI code; mod.ts never loads it", async () => {
  const [modules, main] = await Promise.all([graphOf("testing.ts"), graphOf("mod.ts")]);
  assert.ok(modules.includes("src/testing/run_progress.ts"), "the graph was read");
  assert.ok(modules.includes("src/task/context.ts"), "the worker's context construction is reused");
  // postgres.js and supabase-js are in this graph only as types (ctx.sql and ctx.supabase).
  const outside = modules.filter((m) => /^src\/(worker|cli|operations)\//.test(m));
  assert.deepEqual(outside, [], "testing.ts loads no worker, CLI or operations code");
  assert.deepEqual(
    main.filter((m) => m.startsWith("src/testing/")),
    [],
    "mod.ts loads src/testing/",
  );
});

/**
 * What bench/ and local/ may import from src/ without an entry: the tools they drive or measure,
 * which no entry exports: the local Postgres launcher of `pgflow db` (servers for benchmarks and
 * tests), the dashboard's and `pgflow status`'s queries (bench/history.ts times them), and the
 * exact-JSON functions bench/json_cost.ts times.
 */
const TOOL_INTERNALS =
  /^src\/(cli\/db\/|cli\/dashboard\/|cli\/status\.ts$|util\/json_(parse|write)\.ts$)/;

Deno.test("bench/ and local/ reach the engine through mod.ts and tools.ts, not its internals", () => {
  const wrong: string[] = [];
  let seen = 0;
  for (const dir of ["bench/", "local/"]) {
    for (const file of tsFiles(new URL(dir, `file://${REPO_ROOT}`))) {
      for (const specifier of importsOf(Deno.readTextFileSync(file))) {
        const target = new URL(specifier, file).pathname.slice(REPO_ROOT.length);
        if (!target.startsWith("src/")) continue;
        seen++;
        if (!TOOL_INTERNALS.test(target)) {
          wrong.push(`${file.pathname.slice(REPO_ROOT.length)} imports ${target}`);
        }
      }
    }
  }
  assert.ok(seen > 5, `read the imports (${seen} into src/)`);
  assert.deepEqual(wrong, [], "import it from mod.ts or tools.ts (export it there if it must be)");
});
