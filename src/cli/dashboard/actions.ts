/**
 * The dashboard's actions on a run (cancel, retry, resume), served only when it was started with
 * `--allow-actions`. Each is a POST that must prove it comes from the dashboard's own page:
 *
 * - the Host check every request passes (no DNS rebinding: see `hosts.ts`);
 * - `Sec-Fetch-Site: same-origin` and an `Origin` naming the host the request was sent to,
 *   when the client sends them (every current browser does on a POST);
 * - `Content-Type: application/json`, which a cross-site form cannot send without a preflight the
 *   dashboard never answers;
 * - the header `X-Pgflow-Token` with this process's random token, which only a page of the
 *   dashboard's own origin can read (from `/api/session`: no CORS headers, so no other site's
 *   script can read the answer).
 *
 * The action itself is one call of the engine's SQL function (`pgflow.cancel_run`, `retry_run`,
 * `resume_run`), outside the read-only transactions every read uses.
 *
 * @module
 */
import type { Sql } from "../../platform/types.ts";

/** The actions. */
export const ACTIONS = ["cancel", "retry", "resume"] as const;

/** One action. */
export type ActionName = typeof ACTIONS[number];

/** The header that carries the token. */
export const TOKEN_HEADER = "x-pgflow-token";

/** The longest cancel reason accepted. */
export const MAX_REASON = 500;

/** What an action answers. */
export interface ActionResult {
  /** The action. */
  readonly action: ActionName;
  /** The run acted on. */
  readonly runId: string;
  /** Its flow. */
  readonly flowSlug: string;
  /** cancel: the run's status after it; retry and resume: the new run's status. */
  readonly status: string;
  /** cancel: whether this call cancelled it (false: it had already ended). */
  readonly cancelled?: boolean;
  /** retry and resume: the new run. */
  readonly newRunId?: string;
}

/** A refused or failed action: the HTTP status and a one-line message for the page. */
export class ActionError extends Error {
  /** @param status the HTTP status to answer */
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = "ActionError";
  }
}

/**
 * A fresh per-process token: 32 random bytes as hex.
 *
 * @example
 * ```ts
 * import { newToken } from "./actions.ts";
 *
 * newToken().length; // 64
 * ```
 */
export function newToken(): string {
  return Array.from(
    crypto.getRandomValues(new Uint8Array(32)),
    (b) => b.toString(16).padStart(2, "0"),
  )
    .join("");
}

/**
 * Checks that `request` (whose Host was already accepted) comes from the dashboard's own page;
 * throws an {@link ActionError} (403, or 415 for the content type) naming what is wrong.
 *
 * @example
 * ```ts
 * import { checkSameOrigin } from "./actions.ts";
 *
 * // checkSameOrigin(request, token); // throws ActionError(403, …) for a cross-site request
 * ```
 */
export function checkSameOrigin(request: Request, token: string): void {
  const site = request.headers.get("sec-fetch-site");
  if (site !== null && site !== "same-origin") {
    throw new ActionError(403, `cross-site request refused (Sec-Fetch-Site: ${site.slice(0, 40)})`);
  }
  const origin = request.headers.get("origin");
  const host = request.headers.get("host") ?? "";
  // https too: a TLS-terminating proxy in front passes the Host it was asked for.
  if (origin !== null && origin !== `http://${host}` && origin !== `https://${host}`) {
    throw new ActionError(
      403,
      `cross-origin request refused: Origin ${origin.slice(0, 100)} is not http://${
        host.slice(0, 100)
      }`,
    );
  }
  const type = request.headers.get("content-type") ?? "";
  if (!/^application\/json\s*(;|$)/i.test(type)) {
    throw new ActionError(415, "an action is a JSON POST: send Content-Type: application/json");
  }
  if (!sameToken(request.headers.get(TOKEN_HEADER) ?? "", token)) {
    throw new ActionError(
      403,
      `missing or wrong ${TOKEN_HEADER}: reload the dashboard's page (the token changes when it restarts)`,
    );
  }
}

/** Compares in time independent of where the strings differ. */
function sameToken(given: string, token: string): boolean {
  if (given.length !== token.length) return false;
  let diff = 0;
  for (let i = 0; i < token.length; i++) diff |= given.charCodeAt(i) ^ token.charCodeAt(i);
  return diff === 0;
}

/**
 * Reads the optional `{ "reason": "…" }` body of a cancel (at most 4 KiB).
 *
 * @example
 * ```ts
 * import { readReason } from "./actions.ts";
 *
 * // const reason = await readReason(request); // string | null
 * ```
 */
export async function readReason(request: Request): Promise<string | null> {
  const text = await request.text();
  if (text.length > 4096) throw new ActionError(413, "the request body is over 4 KiB");
  if (text.trim() === "") return null;
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new ActionError(400, 'the body must be JSON, e.g. {"reason": "wrong input"}');
  }
  const reason = (body as { reason?: unknown } | null)?.reason;
  if (reason === undefined || reason === null || reason === "") return null;
  if (typeof reason !== "string" || reason.length > MAX_REASON) {
    throw new ActionError(400, `reason must be text of at most ${MAX_REASON} characters`);
  }
  return reason;
}

/**
 * Runs one action on `runId` through the engine's SQL function.
 *
 * @example
 * ```ts
 * import { runAction } from "./actions.ts";
 *
 * // const { newRunId } = await runAction(sql, "retry", runId, null);
 * ```
 */
export async function runAction(
  sql: Sql,
  action: ActionName,
  runId: string,
  reason: string | null,
): Promise<ActionResult> {
  try {
    if (action === "cancel") {
      const [row] = await sql<
        { run_id: string; flow_slug: string; status: string; cancelled: boolean }[]
      >`select run_id::text, flow_slug, status, cancelled
        from pgflow.cancel_run(${runId}::uuid, ${reason}::text)`;
      return {
        action,
        runId: row.run_id,
        flowSlug: row.flow_slug,
        status: row.status,
        cancelled: row.cancelled,
      };
    }
    const [row] = action === "retry"
      ? await sql<{ run_id: string; flow_slug: string; status: string }[]>`
          select run_id::text, flow_slug, status from pgflow.retry_run(${runId}::uuid)`
      : await sql<{ run_id: string; flow_slug: string; status: string }[]>`
          select run_id::text, flow_slug, status from pgflow.resume_run(${runId}::uuid)`;
    return { action, runId, flowSlug: row.flow_slug, status: row.status, newRunId: row.run_id };
  } catch (error) {
    const e = error as { code?: string; message?: string };
    if (e.code === "P0002") throw new ActionError(404, e.message ?? `no run ${runId}`);
    if (e.code === "55000") throw new ActionError(409, e.message ?? "the run cannot be changed so");
    if (e.code === "42883") {
      throw new ActionError(
        501,
        `this database has no pgflow.${action}_run: upgrade its schema with pgflow migrate`,
      );
    }
    if (e.code === "42501") {
      throw new ActionError(
        403,
        `the dashboard's database role may not call pgflow.${action}_run: connect as a role that can (service_role or the owner)`,
      );
    }
    // The message and SQLSTATE only: details can quote row values.
    const code = e.code && /^[0-9A-Z]{5}$/.test(e.code) ? ` (SQLSTATE ${e.code})` : "";
    throw new ActionError(
      503,
      `could not ${action} run ${runId}: ${e.message ?? String(error)}${code}`,
    );
  }
}
