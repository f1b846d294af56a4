/**
 * `pgflow runs start <flow|alias> --input JSON`: starts a run by slug or alias, its input checked
 * by the flow's schema when the module exporting the flows is given (`--flows`), as the client
 * checks it; with `--many`, one run per element of an array, in one call (`client.startFlows`).
 *
 * @module
 */
import type { PgflowClient } from "../../client/client.ts";
import { StartFlowError } from "../../client/errors.ts";
import { CliError, command, progress, result } from "../output.ts";

/** What `runs start` was asked. */
export interface StartRequest {
  /** The flow slug or alias, as typed. */
  readonly name: string;
  /** The run's input. */
  readonly input: unknown;
  /** The run's id, when given (idempotent: the same id is the same run). */
  readonly runId?: string;
  /** Print one JSON object instead of a line. */
  readonly json: boolean;
}

/**
 * Starts the run and prints it; returns its id and concrete flow. A refusal (an unknown flow, an
 * input that fails the schema) is a {@link CliError} with the database's or the schema's words
 * (never the input's values).
 *
 * @example
 * ```ts
 * import { startRun } from "./start.ts";
 *
 * // const { runId } = await startRun(client, { name: "order", input: { id: 7 }, json: false });
 * ```
 */
export async function startRun(
  client: PgflowClient,
  request: StartRequest,
): Promise<{ runId: string; flowSlug: string }> {
  let run;
  try {
    run = await client.startFlow(
      request.name,
      request.input as never,
      request.runId === undefined ? undefined : { runId: request.runId },
    );
  } catch (error) {
    throw refusal(error);
  }
  const startedAs = run.flowSlug === request.name ? null : request.name;
  if (request.json) {
    result(JSON.stringify({ runId: run.runId, flowSlug: run.flowSlug, startedAs }));
  } else {
    result(
      `started run ${run.runId} of ${run.flowSlug}` +
        (startedAs === null ? "" : ` (through alias ${startedAs})`),
    );
    progress(`follow it: \`${command(`runs watch ${run.runId.slice(0, 8)}`)}\``);
  }
  return { runId: run.runId, flowSlug: run.flowSlug };
}

/** What `runs start --many` was asked. */
export interface StartManyRequest {
  /** The flow slug or alias, as typed. */
  readonly name: string;
  /** One input per run. */
  readonly inputs: readonly unknown[];
  /** Print one JSON object instead of a line. */
  readonly json: boolean;
}

/**
 * Starts one run per input in one call and prints how many, of which flow (with `json`, their
 * ids in input order); returns the ids. Refused as {@link startRun} is: an input that fails the
 * schema is named by its index, and nothing is started.
 *
 * @example
 * ```ts
 * import { startRuns } from "./start.ts";
 *
 * // const ids = await startRuns(client, { name: "order", inputs: [{ id: 7 }, { id: 8 }], json: false });
 * ```
 */
export async function startRuns(
  client: PgflowClient,
  request: StartManyRequest,
): Promise<string[]> {
  let runs;
  try {
    runs = await client.startFlows(request.name, request.inputs as never[]);
  } catch (error) {
    throw refusal(error);
  }
  const runIds = runs.map((run) => run.runId);
  const flowSlug = runs[0]?.flowSlug ?? request.name;
  const startedAs = flowSlug === request.name ? null : request.name;
  if (request.json) {
    result(JSON.stringify({ runIds, flowSlug, startedAs }));
  } else {
    result(
      `started ${runIds.length} run${runIds.length === 1 ? "" : "s"} of ${flowSlug}` +
        (startedAs === null ? "" : ` (through alias ${startedAs})`),
    );
    progress(`list them: \`${command(`runs list --flow ${flowSlug}`)}\``);
  }
  return runIds;
}

/** A start the database or the schema refused, as the command's error (never the input's values). */
function refusal(error: unknown): unknown {
  if (!(error instanceof StartFlowError)) return error;
  return new CliError(
    error.code === "22023"
      ? `${error.message}. \`${command("aliases list")}\` lists the aliases; a flow exists once ` +
        `a worker or \`${command("compile")}\` compiled it`
      : error.message,
  );
}
