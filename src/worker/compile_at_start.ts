import { pgMessage } from "../platform/pg_message.ts";
import type { Sql } from "../platform/types.ts";
import type { CompilableFlow } from "../compile/shape.ts";
import {
  type CompileResult,
  ensureFlowCompiled,
  type OptionDifference,
} from "../compile/ensure.ts";
import { DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
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

export type { CompileResult, OptionDifference } from "../compile/ensure.ts";

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
      result = await ensureFlowCompiled(sql, definition, timeoutMs);
    } catch (error) {
      throw new WorkerStartupError(
        `flow "${slug}" could not be compiled: ${pgMessage(error)}`,
      );
    }
    if (result.status === "recompiled") warnRecompiled(log, slug, result);
    else log.info("flow compiled", { flow: slug, status: result.status });
    if (result.status === "verified") warnOptionDrift(log, slug, result.optionDifferences ?? []);
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

/**
 * Local development replaced a changed definition in place, deleting its runs: loud, with what was
 * lost, because a newcomer who edits a flow and restarts would otherwise see their runs vanish
 * behind an `info` line.
 */
function warnRecompiled(log: Logger, flow: string, result: CompileResult): void {
  const runs = result.deletedRuns ?? 0;
  const tasks = result.deletedTasks ?? 0;
  const withdrawn = result.withdrawnWorkers ?? 0;
  log.warn("flow recompiled: its runs were deleted", {
    flow,
    deletedRuns: runs,
    deletedTasks: tasks,
    withdrawnWorkers: withdrawn,
    differences: result.differences.join("; "),
    action: `local development replaced ${flow}'s changed definition and deleted its ${runs} ` +
      `run(s) and ${tasks} task(s)` +
      (withdrawn > 0
        ? `; ${withdrawn} running worker(s) of the old definition no longer claim its tasks: ` +
          `restart them`
        : "") +
      `. To keep runs, deploy a changed flow under a new slug (e.g. ${flow}_v2)`,
  });
}

/**
 * One `warn` per option the code changed under an existing slug: the database keeps the stored
 * value (ensure_flow_compiled applies none of them outside local development), so the change has
 * no effect until it is deployed under a new slug.
 */
function warnOptionDrift(
  log: Logger,
  flow: string,
  differences: readonly OptionDifference[],
): void {
  for (const d of differences) {
    const where = d.step === null ? "flow" : `step ${d.step}`;
    log.warn("flow option differs from the stored one; the stored value applies", {
      flow,
      ...(d.step === null ? {} : { step: d.step }),
      option: d.option,
      stored: d.stored,
      supplied: d.supplied,
      action: `${where} ${d.option} stays ${d.stored ?? "inherited"}: options of an existing ` +
        `slug never change in place; deploy the change as a new flow slug (e.g. ${flow}_v2)`,
    });
  }
}
