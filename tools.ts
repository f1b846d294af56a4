/**
 * `@pgflow/shared/tools`: what operators and tooling build on, kept out of the main entry so that
 * `@pgflow/shared` holds only what a flow, a worker or a client needs.
 *
 * - the compiled view of a flow the worker registers (`extractFlowShape`, `extractFlowOptions`,
 *   `extractRoutePlan`), for deploy checks that compare flows without a database;
 * - the coverage check behind `pgflow coverage` (`queueCoverage`, `coverageCounts`,
 *   `formatCoverage`);
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
export { coverageCounts, formatCoverage, queueCoverage } from "./src/operations/coverage.ts";
export type { CoverageRow, CoverageStatus } from "./src/operations/coverage.ts";
export { describeConnection, ownsServerSession } from "./src/platform/connection_kind.ts";
export type { ConnectionInfo } from "./src/platform/connection_kind.ts";
export { bounded } from "./src/platform/deadline.ts";
export { installTypeFetchGuard } from "./src/platform/type_fetch_guard.ts";
