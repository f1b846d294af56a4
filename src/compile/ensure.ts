import type { Sql } from "../platform/types.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import {
  type CompilableFlow,
  extractAlias,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "./shape.ts";

/**
 * A runtime option whose supplied value differs from the stored one.
 *
 * @example
 * ```ts
 * import type { OptionDifference } from "@pgflow/shared/tools";
 *
 * const d: OptionDifference = { step: "classify", option: "timeout", stored: 30, supplied: 60 };
 * ```
 */
export interface OptionDifference {
  /** The step, or `null` for a flow-wide option. */
  readonly step: string | null;
  /** The option as the DSL spells it (`maxAttempts`, `baseDelay`, `timeout`, `startDelay`). */
  readonly option: string;
  /** The stored value; `null` for a step option that inherits the flow's. */
  readonly stored: number | null;
  /** The value the worker's definition gives; `null` for inherit. */
  readonly supplied: number | null;
}

/**
 * What `pgflow.ensure_flow_compiled` answers.
 *
 * @example
 * ```ts
 * import type { CompileResult } from "@pgflow/shared/tools";
 *
 * const created = (result: CompileResult) => result.status === "compiled";
 * ```
 */
export interface CompileResult {
  /** What the database did. */
  readonly status: "compiled" | "verified" | "mismatch" | "recompiled";
  /** The differences found, one line each. */
  readonly differences: readonly string[];
  /**
   * Options that differ from the stored ones. SQL decides what they mean: under `verified` they
   * were not applied (the stored options govern the slug; the worker warns about each), under
   * `recompiled` (local development) they were.
   */
  readonly optionDifferences?: readonly OptionDifference[];
  /** Under `recompiled`: the runs of the old definition deleted with it. */
  readonly deletedRuns?: number;
  /** Under `recompiled`: the tasks of the old definition deleted with it. */
  readonly deletedTasks?: number;
  /** Under `recompiled`: live workers of the old definition that no longer claim the flow. */
  readonly withdrawnWorkers?: number;
}

/**
 * The one call that sends a definition (shape, routes, options, alias) to
 * `pgflow.ensure_flow_compiled` and answers what the database did: the worker's startup compile,
 * `pgflow compile` and `pgflow plan` (inside a transaction it rolls back) all use it. A
 * `mismatch` changed nothing; the database never recompiles in place outside local development.
 *
 * @example
 * ```ts
 * import { createPool, Flow } from "@pgflow/shared";
 * import { ensureFlowCompiled } from "@pgflow/shared/tools";
 *
 * const flow = new Flow<{ id: string }>({ slug: "compile_example" })
 *   .step({ slug: "load" }, (input) => input.id);
 * const sql = createPool("postgres://postgres@127.0.0.1:5432/postgres");
 * // const { status, differences } = await ensureFlowCompiled(sql, flow);
 * ```
 */
export async function ensureFlowCompiled(
  sql: Sql,
  definition: CompilableFlow,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<CompileResult> {
  const [row] = await bounded(
    sql<{ result: CompileResult }[]>`
      select pgflow.ensure_flow_compiled(
        ${definition.slug}, ${JSON.stringify(extractFlowShape(definition))}::text::jsonb,
        ${JSON.stringify(extractRoutePlan(definition))}::text::jsonb,
        ${JSON.stringify(extractFlowOptions(definition))}::text::jsonb,
        ${extractAlias(definition)}::text) as result`,
    "ensure_flow_compiled",
    timeoutMs,
  );
  return row.result;
}
