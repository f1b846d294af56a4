/**
 * What the dashboard's JSON endpoints answer, as types: the server builds these, the page's
 * script (`browser/`) reads them. Every time is an ISO 8601 string.
 *
 * @module
 */
import type { ActionResult } from "./actions.ts";
import type { DepthSample } from "./history.ts";
import type { Overview, QueueInfo } from "./queries.ts";
import type { RunDetail } from "./run_view.ts";
import type { RunSearchRow } from "./search.ts";

export type { ActionResult, RunDetail, RunSearchRow };

/** One queue of the overview with its recent depths (oldest first), for the sparkline. */
export interface QueueWithHistory extends QueueInfo {
  /** Depth samples of the last minutes, oldest first. */
  readonly history: readonly DepthSample[];
}

/**
 * What `GET /api/overview` answers.
 *
 * @example
 * ```ts
 * import type { OverviewAnswer } from "./api.ts";
 *
 * const deepest = (o: OverviewAnswer) => Math.max(0, ...o.queues.map((q) => q.messages ?? 0));
 * ```
 */
export interface OverviewAnswer extends Omit<Overview, "queues"> {
  /** Queues by name, each with its depth history. */
  readonly queues: readonly QueueWithHistory[];
}

/**
 * What `GET /api/session` answers: whether actions are allowed, and then the token they carry.
 *
 * @example
 * ```ts
 * import type { SessionAnswer } from "./api.ts";
 *
 * const token = (s: SessionAnswer) => (s.actions ? s.token : undefined);
 * ```
 */
export type SessionAnswer =
  | { readonly actions: false }
  | { readonly actions: true; readonly token: string };

/**
 * What every endpoint answers when it fails (4xx, 5xx): one line for the page.
 *
 * @example
 * ```ts
 * import type { ErrorAnswer } from "./api.ts";
 *
 * const answer: ErrorAnswer = { error: "a run id is a UUID" };
 * ```
 */
export interface ErrorAnswer {
  /** What went wrong. */
  readonly error: string;
}
