import type { Json } from "../util/json.ts";

/**
 * A (flow_slug, step_slug) pair a worker has a handler for: one entry of its support set.
 *
 * @example
 * ```ts
 * import type { SupportedPair } from "@pgflow/shared";
 *
 * const pair: SupportedPair = ["thread_triage_v1", "classify"];
 * ```
 */
export type SupportedPair = readonly [flow: string, step: string];

/**
 * What the claim did with one message id (docs/design.md, Claim table). `handed_back`: its
 * task is outside this worker's support set and a live worker on the queue serves it, so the
 * message was made visible again at once and announced to that worker; `unsupported`: outside the
 * set, and no live worker serves it; `surplus`: a task this worker serves, read beyond the tasks
 * it could claim (a read past another worker's backlog), made visible again at once and announced
 * for whichever worker serving it reads next; `rate_limited`: its task's rate-limit window was full,
 * so the task went back to waiting and its message was archived (a release sends a new one).
 */
export type Disposition =
  | "claimed"
  | "started"
  | "ineligible"
  | "unknown"
  | "unsupported"
  | "handed_back"
  | "surplus"
  | "rate_limited";

/** A task this worker now owns: only claimed rows carry identity and input. */
export interface ClaimedTask {
  /** The message id, as an exact decimal string. */
  readonly messageId: string;
  /** The concrete flow slug. */
  readonly flowSlug: string;
  /** The run id. */
  readonly runId: string;
  /** The step slug. */
  readonly stepSlug: string;
  /** The task index. */
  readonly taskIndex: number;
  /** The handler input SQL built. */
  readonly input: Json;
  /** The attempt number this claim started (1-based). */
  readonly attempt: number;
  /** The input's size in bytes of JSON text, when the read said (`octet_length`). */
  readonly inputBytes?: number;
  /** True when the input was over the read's `maxInputBytes` and left in the database (`input` is null). */
  readonly inputWithheld?: boolean;
  /** The run's trace context (`runs.traceparent`), read only while spans are recorded. */
  readonly traceparent?: string | null;
}

/**
 * A message that was not claimed: its id, why, and the identity of the task that owns it (all
 * `null` for an `unknown` message, which no task owns). Never an input or a body.
 */
export interface SkippedMessage {
  /** The message id, as an exact decimal string. */
  readonly messageId: string;
  /** Why it was not claimed. */
  readonly disposition: Exclude<Disposition, "claimed">;
  /** The owning task's flow slug. */
  readonly flowSlug: string | null;
  /** The owning task's run id. */
  readonly runId: string | null;
  /** The owning task's step slug. */
  readonly stepSlug: string | null;
}
