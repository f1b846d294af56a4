/**
 * `pgflow runs start <flow|alias> --input JSON`: starts a run by slug or alias, its input checked
 * by the flow's schema when the module exporting the flows is given (`--flows`), as the client
 * checks it.
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
    if (!(error instanceof StartFlowError)) throw error;
    throw new CliError(
      error.code === "22023"
        ? `${error.message}. \`${
          command("aliases list")
        }\` lists the aliases; a flow exists once ` +
          `a worker or \`${command("compile")}\` compiled it`
        : error.message,
    );
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
