/**
 * A run as the command line names it: its whole id, or the start of it (the 8 characters the
 * dashboard shows, or more) as long as exactly one run's id starts so.
 *
 * @module
 */
import type { PgflowClient } from "../../client/client.ts";
import { UsageError } from "../output.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** How many matches an ambiguous start of an id lists. */
const SHOWN = 10;

/** A run named on the command line: its id, or the start of one. */
export type RunRef = { readonly id: string } | { readonly prefix: string };

/**
 * Reads a run id or the start of one (hex digits and dashes, as printed), lower-cased.
 *
 * @example
 * ```ts
 * import { parseRunRef } from "./resolve.ts";
 *
 * parseRunRef("2e9ff349", "pgflow runs show"); // { prefix: "2e9ff349" }
 * ```
 */
export function parseRunRef(value: string, command: string): RunRef {
  if (UUID.test(value)) return { id: value.toLowerCase() };
  if (/^[0-9a-f-]{1,35}$/i.test(value)) return { prefix: value.toLowerCase() };
  throw new UsageError(
    `${command}: ${JSON.stringify(value)} is not a run id; pass a run id as "pgflow runs list" ` +
      "prints it (0b6c1d2e-7f00-4a1b-8c2d-3e4f5a6b7c8d) or its start (0b6c1d2e)",
  );
}

/**
 * The id of the run `ref` names; `null` when no run's id starts so. An ambiguous start is a usage
 * error listing the runs it matches.
 *
 * @example
 * ```ts
 * import { resolveRunRef } from "./resolve.ts";
 *
 * // const id = await resolveRunRef(client, { prefix: "2e9ff349" }, "pgflow runs show");
 * ```
 */
export async function resolveRunRef(
  client: PgflowClient,
  ref: RunRef,
  command: string,
): Promise<string | null> {
  if ("id" in ref) return ref.id;
  const found = await client.listRuns({ runIdPrefix: ref.prefix, limit: SHOWN + 1 });
  if (found.length === 1) return found[0].runId;
  if (found.length === 0) return null;
  const listed = found.slice(0, SHOWN).map((r) => `${r.runId} (${r.flowSlug}, ${r.status})`);
  throw new UsageError(
    `${command}: ${found.length > SHOWN ? `more than ${SHOWN}` : found.length} runs start with ` +
      `${ref.prefix}: ${listed.join(", ")}${
        found.length > SHOWN ? ", …" : ""
      }; give more of the id`,
  );
}

/**
 * What the command line said when a run was not found: the id, or the start of it.
 *
 * @example
 * ```ts
 * import { describeRef } from "./resolve.ts";
 *
 * describeRef({ prefix: "2e9f" }); // "no run's id starts with 2e9f"
 * ```
 */
export function describeRef(ref: RunRef): string {
  return "id" in ref
    ? `run ${ref.id} does not exist (or was pruned)`
    : `no run's id starts with ${ref.prefix}`;
}
