/**
 * `@pgflow/shared/tools`: what operators and tooling build on, kept out of the main entry so that
 * `@pgflow/shared` holds only what a flow, a worker or a client needs.
 *
 * - the compiled view of a flow the worker registers (`extractFlowShape`, `extractFlowOptions`,
 *   `extractRoutePlan`), for deploy checks that compare flows without a database;
 * - the coverage check behind `pgflow coverage` (`queueCoverage`, `coverageCounts`,
 *   `formatCoverage`);
 * - compiling a definition into a database, as a worker does at start and `pgflow compile` does
 *   (`ensureFlowCompiled`);
 * - the worker's numeric options with their defaults and ranges (`WORKER_OPTIONS`), for tooling
 *   that sets or shows them (the benchmarks take their defaults from it);
 * - connection helpers: what is between a pool and Postgres (`describeConnection`,
 *   `ownsServerSession`), a bound on any query (`bounded`), and the guard `createPool` installs
 *   for pools made with plain `postgres()` (`installTypeFetchGuard`).
 *
 * @example
 * ```ts
 * import { Flow } from "@pgflow/shared";
 * import { extractFlowShape } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<{ id: string }>({ slug: "tools_example" })
 *   .step({ slug: "load" }, (input) => input.id);
 * console.log(extractFlowShape(flow).steps.map((s) => s.slug)); // ["load"]
 * ```
 *
 * @module
 */

export {
  extractAlias,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "./src/compile/shape.ts";
export type {
  CompilableFlow,
  FlowOptionsPlan,
  FlowShape,
  RoutePlan,
  StepShape,
} from "./src/compile/shape.ts";
export { ensureFlowCompiled } from "./src/compile/ensure.ts";
export type { CompileResult, OptionDifference } from "./src/compile/ensure.ts";
export { coverageCounts, formatCoverage, queueCoverage } from "./src/operations/coverage.ts";
export type { CoverageRow, CoverageStatus } from "./src/operations/coverage.ts";
export { describeConnection, ownsServerSession } from "./src/platform/connection_kind.ts";
export type { ConnectionInfo } from "./src/platform/connection_kind.ts";
export { bounded } from "./src/platform/deadline.ts";
export { installTypeFetchGuard } from "./src/platform/type_fetch_guard.ts";
export { WORKER_OPTIONS } from "./src/worker/options.ts";
export type { IntegerOption, NumericOptionName } from "./src/worker/options.ts";
