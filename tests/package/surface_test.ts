/**
 * The public surface is the one intended. `@pgflow/shared` (mod.ts) exports what a flow, a worker
 * or a client needs, and exactly the runtime names listed here: adding one (or letting a tool slip
 * back in) fails until this list and the CHANGELOG say so. Tools and internals live in
 * `@pgflow/shared/tools`, which shares no name with the main entry. Every entry point `deno.json`
 * exports passes `deno doc --lint` (as JSR lints the package: all entries together).
 */
import assert from "node:assert/strict";
import { assertSucceeded, deno, REPO_ROOT } from "./deno_cmd.ts";

/** The runtime (non-type) exports of mod.ts. */
const MAIN_RUNTIME = [
  // The DSL.
  "ENGINE_VERSION",
  "Flow",
  "FlowDefinitionError",
  "MAX_SLUG_LENGTH",
  "validateSlug",
  // Routing.
  "MAX_QUEUE_NAME_LENGTH",
  "RoutingError",
  "privateQueueName",
  "routeFlow",
  "validateQueueName",
  "withStepQueues",
  // The worker and its connections.
  "DatabaseConnectionError",
  "DatabaseTimeoutError",
  "DatabaseUrlError",
  "EdgeWorker",
  "PayloadTooLarge",
  "WorkerConfigError",
  "WorkerStartupError",
  "createLogger",
  "createPool",
  "createWorker",
  // The client.
  "ClientClosedError",
  "ClientConfigError",
  "InputValidationError",
  "RunActionError",
  "RunCancelledError",
  "RunError",
  "RunFailedError",
  "RunFlowMismatchError",
  "RunNotFoundError",
  "RunStatusError",
  "RunTimeoutError",
  "StartFlowError",
  "createClient",
  // Exact JSON.
  "exactNumber",
  "isExactNumber",
  "parseJson",
];

/** The runtime exports of the tools entry. */
const TOOLS_RUNTIME = [
  "bounded",
  "coverageCounts",
  "describeConnection",
  "extractAlias",
  "extractFlowOptions",
  "extractFlowShape",
  "extractRoutePlan",
  "formatCoverage",
  "installTypeFetchGuard",
  "ownsServerSession",
  "queueCoverage",
];

/** Names that are internals: exported by neither entry. */
const PRIVATE = [
  "suggestQueueName",
  "partialNote",
  "DEFAULT_QUERY_TIMEOUT_MS",
  "DEFAULT_WAIT_TIMEOUT_MS",
];

interface Exports {
  readonly runtime: string[];
  readonly types: string[];
}

/** The exports of one entry point, read with `deno doc --json`. */
async function exportsOf(entry: string): Promise<Exports> {
  const result = await deno(["doc", "--json", entry], { cwd: REPO_ROOT });
  assertSucceeded(`deno doc --json ${entry}`, result);
  const doc = JSON.parse(result.stdout) as {
    nodes: Record<string, { symbols: { name: string; declarations: { kind: string }[] }[] }>;
  };
  const runtime: string[] = [];
  const types: string[] = [];
  for (const { symbols } of Object.values(doc.nodes)) {
    for (const symbol of symbols) {
      const kinds = symbol.declarations.map((d) => d.kind);
      const isValue = kinds.some((k) => ["function", "class", "variable", "enum"].includes(k));
      (isValue ? runtime : types).push(symbol.name);
    }
  }
  return { runtime: runtime.sort(), types: types.sort() };
}

const config = JSON.parse(Deno.readTextFileSync(`${REPO_ROOT}deno.json`)) as {
  exports: Record<string, string>;
};

Deno.test("deno.json exports the main entry, the tools and the CLI", () => {
  assert.deepEqual(config.exports, {
    ".": "./mod.ts",
    "./tools": "./tools.ts",
    "./cli": "./src/cli/main.ts",
  });
});

Deno.test("mod.ts exports exactly the intended runtime names, and no tool or internal", async () => {
  const main = await exportsOf("mod.ts");
  assert.deepEqual(main.runtime, [...MAIN_RUNTIME].sort());
  for (const name of [...TOOLS_RUNTIME, ...PRIVATE]) {
    assert.ok(!main.runtime.includes(name), `mod.ts exports ${name}`);
  }
});

Deno.test("the tools entry exports the tools, none of them also in mod.ts", async () => {
  const [main, tools] = await Promise.all([exportsOf("mod.ts"), exportsOf("tools.ts")]);
  assert.deepEqual(tools.runtime, [...TOOLS_RUNTIME].sort());
  const both = [...tools.runtime, ...tools.types].filter((name) =>
    main.runtime.includes(name) || main.types.includes(name)
  );
  assert.deepEqual(both, [], "exported by both entries");
  for (const name of PRIVATE) assert.ok(!tools.runtime.includes(name), `tools export ${name}`);
});

Deno.test("deno doc --lint passes over every entry point deno.json exports", async () => {
  const entries = Object.values(config.exports);
  const result = await deno(["doc", "--lint", ...entries], { cwd: REPO_ROOT });
  const errors = result.stderr.split("\n").filter((line) => /^error/.test(line));
  assert.equal(result.code, 0, `deno doc --lint ${entries.join(" ")}:\n${errors.join("\n")}`);
  // A warning would be a dependency's (supabase-js 2.49 pulled in @types/node, whose path
  // references deno doc reads as package names: 60 lines of noise in the CI's doc stage).
  const warnings = result.stderr.split("\n").filter((line) => /warning/i.test(line));
  assert.deepEqual(warnings, [], `deno doc --lint ${entries.join(" ")} warned`);
});
