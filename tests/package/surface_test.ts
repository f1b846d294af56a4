/**
 * The public surface is the one intended. `@pgflow/shared` (mod.ts) exports what a flow, a worker
 * or a client needs, and exactly the runtime names and the types listed here: adding one,
 * removing one (a type is as much a user's contract as a function) or letting a tool slip back in
 * fails until these lists and the CHANGELOG say so. Tools and internals live in
 * `@pgflow/shared/tools`, which shares no name with the main entry. `@pgflow/shared/dsl` exports
 * the DSL and routing alone, a part of the main entry's names. Every entry point `deno.json`
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
  "MAX_RETRY_AFTER_MS",
  "MAX_SLUG_LENGTH",
  "RetryAfter",
  "StepTimedOut",
  "WorkerShutdown",
  "validateSlug",
  "durationSeconds",
  "eventPayload",
  "EventPayloadError",
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
  "ScheduleError",
  "StartFlowError",
  "createClient",
  // Exact JSON.
  "exactNumber",
  "isExactNumber",
  "parseJson",
];

/** The type exports of mod.ts. */
const MAIN_TYPES = [
  "Duration",
  "DurationUnit",
  "EventWait",
  "SleepOptions",
  "SleepWait",
  "WaitDefinition",
  "WaitForEventOptions",
  "WaitStepOptions",
  "EventAddress",
  "EventDelivery",
  "EventPayloadOf",
  "EventStepSlug",
  "SendEventResult",
  "StepWait",
  "RetryAfterOptions",
  "RetryAfterResponse",
  // Schedules through the client.
  "Schedule",
  "ScheduleChanges",
  "ScheduleClient",
  "ScheduleSpec",
  "AnyFlow",
  "AnyStepHandler",
  "AnySteps",
  "ArrayStepSlug",
  "AttemptOutcome",
  "CancelResult",
  "Checked",
  "CheckedArray",
  "ChildFlowDefinition",
  "ChildFlowOptions",
  "ChildInputMapping",
  "ChildInputOption",
  "ChildRun",
  "ClientFlows",
  "ClientOptions",
  "ClientTiming",
  "ConcurrencyLimit",
  "ConditionOptions",
  "ContainmentPattern",
  "DatabaseUrlPart",
  "DepsInput",
  "DepsTable",
  "EdgeWorkerApi",
  "EdgeWorkerConfig",
  "ElementOf",
  "Env",
  "EventsOptions",
  "ExactNumber",
  "ExtractFlowContext",
  "ExtractFlowDeps",
  "ExtractFlowEnv",
  "ExtractFlowInput",
  "ExtractFlowSteps",
  "ExtractFlowStepsMeta",
  "ExtractHandlerContext",
  "FlowCarrier",
  "FlowControlOptions",
  "FlowInputOf",
  "FlowInputSchemaOption",
  "FlowOptions",
  "FlowOutputOf",
  "FlowRun",
  "FlowTypes",
  "FlowWorker",
  "HandlerContext",
  "HandlerInput",
  "InputIssue",
  "IsOptionalStep",
  "IsTypedFlow",
  "Json",
  "JsonArrayOutput",
  "JsonOutput",
  "JsonPrimitive",
  "JsonValueCheck",
  "LeafSlug",
  "ListRunsOptions",
  "LogFields",
  "LogLevel",
  "LogRecord",
  "LogSink",
  "Logger",
  "LoggerOptions",
  "MapItem",
  "MapOptions",
  "NewSlug",
  "NoUnknownSteps",
  "PatternSlot",
  "PgflowClient",
  "PgmqMessageRecord",
  "PoolOptions",
  "PreparedStatementsMode",
  "QueueNameOf",
  "QueueWaitingTasks",
  "RateLimit",
  "RestartMode",
  "RestartOptions",
  "RetryOptions",
  "RouteMap",
  "RoutedFlow",
  "RunEvent",
  "RunEventBase",
  "RunLevelEvent",
  "RunParent",
  "RunRestart",
  "RunState",
  "RunStatus",
  "RunStepOutput",
  "RunStepSlug",
  "RunSummary",
  "RuntimeOptions",
  "Simplify",
  "Sql",
  "SslSetting",
  "StandardSchemaV1",
  "StandardSchemaV1Issue",
  "StandardSchemaV1PathSegment",
  "StandardSchemaV1Props",
  "StandardSchemaV1Result",
  "StandardSchemaV1Types",
  "StartFlowOptions",
  "StartFlowsOptions",
  "StepContext",
  "StepDefinition",
  "StepEvent",
  "StepEventFor",
  "StepInput",
  "StepKind",
  "StepMeta",
  "StepOptions",
  "StepOutput",
  "StepQueuedFlow",
  "StepRuntimeOptions",
  "StepSlug",
  "StepSlugOf",
  "StepState",
  "StepStateFor",
  "StepStatus",
  "StepTaskRecord",
  "SubflowMapOptions",
  "SubflowOptions",
  "SupabaseClient",
  "SupportedPair",
  "TaskAttempt",
  "TypesOf",
  "UnwrapFlow",
  "WaitForOptions",
  "WaitingTasks",
  "WakeupMode",
  "WhenMode",
  "WhenUnmetOption",
  "WithStep",
  "WorkerConfigFor",
  "WorkerEnv",
  "WorkerSelection",
  "WorkerStart",
  "WorkerStartArgs",
  "WorkerState",
  "WorkerTarget",
];

/** The runtime exports of the tools entry. */
const TOOLS_RUNTIME = [
  "WORKER_OPTIONS",
  "bounded",
  "coverageCounts",
  "describeConnection",
  "ensureFlowCompiled",
  "extractAlias",
  "extractFlowOptions",
  "extractFlowShape",
  "extractRoutePlan",
  "formatCoverage",
  "installTypeFetchGuard",
  "ownsServerSession",
  "queueCoverage",
];

/** The type exports of the tools entry. */
const TOOLS_TYPES = [
  "CompilableFlow",
  "CompileResult",
  "ConnectionInfo",
  "CoverageRow",
  "CoverageStatus",
  "FlowOptionsPlan",
  "FlowShape",
  "IntegerOption",
  "NumericOptionName",
  "OptionDifference",
  "RoutePlan",
  "StepShape",
];

/** The runtime exports of the DSL entry: the DSL and routing, no worker, no client. */
const DSL_RUNTIME = [
  "durationSeconds",
  "eventPayload",
  "Flow",
  "FlowDefinitionError",
  "MAX_RETRY_AFTER_MS",
  "RetryAfter",
  "StepTimedOut",
  "WorkerShutdown",
  "MAX_QUEUE_NAME_LENGTH",
  "MAX_SLUG_LENGTH",
  "RoutingError",
  "exactNumber",
  "isExactNumber",
  "parseJson",
  "privateQueueName",
  "routeFlow",
  "validateQueueName",
  "validateSlug",
  "withStepQueues",
];

/** The type exports of the DSL entry. */
const DSL_TYPES = [
  "Duration",
  "DurationUnit",
  "EventWait",
  "SleepOptions",
  "SleepWait",
  "WaitDefinition",
  "WaitForEventOptions",
  "WaitStepOptions",
  "RetryAfterOptions",
  "RetryAfterResponse",
  "AnyFlow",
  "AnyStepHandler",
  "AnySteps",
  "ArrayStepSlug",
  "Checked",
  "CheckedArray",
  "ChildFlowDefinition",
  "ChildFlowOptions",
  "ChildInputMapping",
  "ChildInputOption",
  "ConcurrencyLimit",
  "ConditionOptions",
  "ContainmentPattern",
  "DepsInput",
  "DepsTable",
  "ElementOf",
  "Env",
  "ExactNumber",
  "ExtractFlowContext",
  "ExtractFlowDeps",
  "ExtractFlowEnv",
  "ExtractFlowInput",
  "ExtractFlowSteps",
  "ExtractFlowStepsMeta",
  "ExtractHandlerContext",
  "FlowCarrier",
  "FlowControlOptions",
  "FlowInputSchemaOption",
  "FlowOptions",
  "FlowTypes",
  "HandlerContext",
  "HandlerInput",
  "InputIssue",
  "IsOptionalStep",
  "Json",
  "JsonArrayOutput",
  "JsonOutput",
  "JsonPrimitive",
  "JsonValueCheck",
  "MapItem",
  "MapOptions",
  "NewSlug",
  "NoUnknownSteps",
  "PatternSlot",
  "PgmqMessageRecord",
  "RateLimit",
  "RouteMap",
  "RoutedFlow",
  "RuntimeOptions",
  "Simplify",
  "StandardSchemaV1",
  "StandardSchemaV1Issue",
  "StandardSchemaV1PathSegment",
  "StandardSchemaV1Props",
  "StandardSchemaV1Result",
  "StandardSchemaV1Types",
  "StepContext",
  "StepDefinition",
  "StepInput",
  "StepKind",
  "StepMeta",
  "StepOptions",
  "StepOutput",
  "StepQueuedFlow",
  "StepRuntimeOptions",
  "StepSlug",
  "StepTaskRecord",
  "SubflowMapOptions",
  "SubflowOptions",
  "TypesOf",
  "UnwrapFlow",
  "WhenMode",
  "WhenUnmetOption",
  "WithStep",
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

Deno.test("deno.json exports the main entry, the tools, the DSL, the testing helper and the CLI", () => {
  assert.deepEqual(config.exports, {
    ".": "./mod.ts",
    "./tools": "./tools.ts",
    "./dsl": "./dsl.ts",
    "./testing": "./testing.ts",
    "./cli": "./src/cli/main.ts",
  });
});

Deno.test("mod.ts exports exactly the intended runtime names, and no tool or internal", async () => {
  const main = await exportsOf("mod.ts");
  assert.deepEqual(main.runtime, [...MAIN_RUNTIME].sort());
  assert.deepEqual(main.types, [...MAIN_TYPES].sort());
  for (const name of [...TOOLS_RUNTIME, ...PRIVATE]) {
    assert.ok(!main.runtime.includes(name), `mod.ts exports ${name}`);
  }
});

Deno.test("the tools entry exports the tools, none of them also in mod.ts", async () => {
  const [main, tools] = await Promise.all([exportsOf("mod.ts"), exportsOf("tools.ts")]);
  assert.deepEqual(tools.runtime, [...TOOLS_RUNTIME].sort());
  assert.deepEqual(tools.types, [...TOOLS_TYPES].sort());
  const both = [...tools.runtime, ...tools.types].filter((name) =>
    main.runtime.includes(name) || main.types.includes(name)
  );
  assert.deepEqual(both, [], "exported by both entries");
  for (const name of PRIVATE) assert.ok(!tools.runtime.includes(name), `tools export ${name}`);
});

Deno.test("the testing entry exports the in-memory runner and its types, none of them in mod.ts", async () => {
  const [main, testing] = await Promise.all([exportsOf("mod.ts"), exportsOf("testing.ts")]);
  assert.deepEqual(testing.runtime, ["fakeClock", "runFlowInMemory"]);
  assert.deepEqual(testing.types, [
    "HandlerOverride",
    "InMemoryAttempt",
    "InMemoryClock",
    "InMemoryRunResult",
    "InMemoryStepResult",
    "InMemoryStepStatus",
    "RunInMemoryOptions",
    "SkipReason",
  ]);
  const both = [...testing.runtime, ...testing.types].filter((name) =>
    main.runtime.includes(name) || main.types.includes(name)
  );
  assert.deepEqual(both, [], "exported by both entries");
});

Deno.test("the DSL entry exports the DSL and routing, names the main entry has too", async () => {
  const dsl = await exportsOf("dsl.ts");
  assert.deepEqual(dsl.runtime, [...DSL_RUNTIME].sort());
  assert.deepEqual(dsl.types, [...DSL_TYPES].sort());
  const main = [...MAIN_RUNTIME, ...MAIN_TYPES];
  assert.deepEqual([...dsl.runtime, ...dsl.types].filter((name) => !main.includes(name)), []);
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
