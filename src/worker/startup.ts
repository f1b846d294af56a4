import type { Sql } from "../platform/types.ts";
import {
  type CompilableFlow,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "../compile/shape.ts";
import { bounded, DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { Logger } from "../platform/logger.ts";
import {
  readSchemaVersion,
  type SchemaVersion,
  schemaVersionProblem,
} from "../operations/schema_version.ts";
import { ENGINE_VERSION } from "../util/version.ts";
import { WorkerStartupError } from "./errors.ts";

/**
 * Checks that the database's engine schema is the one this worker was built for
 * ({@link ENGINE_VERSION}), before anything is compiled: a missing, older or newer schema is a
 * startup error that names both versions and the command to run. Nothing is changed.
 */
export async function verifySchemaVersion(
  sql: Sql,
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  let found: SchemaVersion;
  try {
    found = await readSchemaVersion(sql, timeoutMs);
  } catch (error) {
    throw new WorkerStartupError(
      `could not read the database's engine version (pgflow.engine_version()): ` +
        `${(error as Error).message}. The worker's database role needs usage on schema pgflow ` +
        `and execute on its functions: connect as the schema's owner (postgres on Supabase)`,
    );
  }
  const problem = schemaVersionProblem(found, ENGINE_VERSION);
  if (problem !== undefined) throw new WorkerStartupError(`worker cannot start: ${problem}`);
  log.info("engine schema", { version: ENGINE_VERSION });
}

/** What `pgflow.ensure_flow_compiled` answers. */
export interface CompileResult {
  /** What the database did. */
  readonly status: "compiled" | "verified" | "mismatch" | "recompiled";
  /** The differences found, one line each. */
  readonly differences: readonly string[];
}

/**
 * Sends each supplied definition (shape, routes, options) to `pgflow.ensure_flow_compiled`. Every
 * definition is checked before the verdict, so one error lists every mismatch at once. A mismatch
 * is a startup error; the database changed nothing for it.
 */
export async function compileDefinitions(
  sql: Sql,
  definitions: readonly CompilableFlow[],
  log: Logger,
  timeoutMs: number = DEFAULT_QUERY_TIMEOUT_MS,
): Promise<void> {
  const mismatches: string[] = [];
  for (const definition of definitions) {
    const slug = definition.slug;
    let result: CompileResult;
    try {
      const [row] = await bounded(
        sql<{ result: CompileResult }[]>`
          select pgflow.ensure_flow_compiled(
            ${slug}, ${JSON.stringify(extractFlowShape(definition))}::text::jsonb,
            ${JSON.stringify(extractRoutePlan(definition))}::text::jsonb,
            ${JSON.stringify(extractFlowOptions(definition))}::text::jsonb) as result`,
        "ensure_flow_compiled",
        timeoutMs,
      );
      result = row.result;
    } catch (error) {
      throw new WorkerStartupError(
        `flow "${slug}" could not be compiled: ${(error as Error).message}`,
      );
    }
    log.info("flow compiled", { flow: slug, status: result.status });
    if (result.status === "mismatch") {
      mismatches.push(...result.differences.map((d) => `${slug}: ${d}`));
    }
  }
  if (mismatches.length > 0) {
    throw new WorkerStartupError(
      `the supplied definitions differ from the stored ones, and this database does not allow ` +
        `recompiling in place; deploy the change as a new flow slug (e.g. a _v2) instead:\n  ` +
        mismatches.join("\n  "),
      mismatches,
    );
  }
}
