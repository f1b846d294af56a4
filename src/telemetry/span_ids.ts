/**
 * The trace identity of a run and its steps, computed from the run id alone. A run's span and its
 * steps' spans are emitted only once they have ended (no process lives as long as a run), yet each
 * attempt, started hours earlier by any worker, must name its step's span as its parent: so these
 * span ids are derived, never drawn at random, and every worker derives the same ones.
 *
 * The trace is the caller's (the run's stored `traceparent`); a run started without one gets a trace
 * of its own whose id is the run id's 32 hex digits.
 *
 * @module
 */

const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const INVALID_SPAN = "0000000000000000";

/** Where a run's spans belong: its trace, its span, and the span it is a child of. */
export interface RunTrace {
  /** The trace id (32 hex digits). */
  readonly traceId: string;
  /** The run's own span id (16 hex digits), derived from the run id. */
  readonly runSpanId: string;
  /** The span the run's span is a child of (the caller's), or `undefined` for a root run. */
  readonly parentSpanId?: string;
  /** The W3C trace flags (bit 0: sampled). */
  readonly traceFlags: number;
}

/**
 * The trace a run's spans belong to, from its id and the `traceparent` stored on its row.
 *
 * @example
 * ```ts
 * import { runTrace } from "./span_ids.ts";
 *
 * const trace = runTrace(
 *   "0b6e2c7e-8d3a-4a7b-9a43-0a5d6f2c1e11",
 *   "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
 * );
 * // trace.traceId === "0af7651916cd43dd8448eb211c80319c", trace.parentSpanId === "b7ad6b7169203331"
 * ```
 */
export function runTrace(runId: string, traceparent?: string | null): RunTrace {
  const runSpanId = spanIdOf(`run ${runId}`);
  const match = traceparent == null ? null : TRACEPARENT.exec(traceparent);
  if (match === null) {
    return { traceId: runId.replaceAll("-", "").toLowerCase(), runSpanId, traceFlags: 1 };
  }
  return {
    traceId: match[1],
    runSpanId,
    parentSpanId: match[2],
    traceFlags: parseInt(match[3], 16),
  };
}

/**
 * The span id of step `stepSlug` of run `runId`: the parent of each of its attempts' spans.
 *
 * @example
 * ```ts
 * import { stepSpanId } from "./span_ids.ts";
 *
 * const id = stepSpanId("0b6e2c7e-8d3a-4a7b-9a43-0a5d6f2c1e11", "fetch"); // 16 hex digits
 * ```
 */
export function stepSpanId(runId: string, stepSlug: string): string {
  return spanIdOf(`step ${runId} ${stepSlug}`);
}

/**
 * The `traceparent` that names step `stepSlug` of a run as the parent: what a child run started by
 * that step stores (`start_flow(..., traceparent => ...)`), so the child run's span is a child of
 * the parent's step span, in the parent's trace.
 *
 * @example
 * ```ts
 * import { stepTraceparent } from "./span_ids.ts";
 *
 * const parent = stepTraceparent("0b6e2c7e-8d3a-4a7b-9a43-0a5d6f2c1e11", "fan_out", null);
 * // "00-0b6e2c7e8d3a4a7b9a430a5d6f2c1e11-<step span id>-01"
 * ```
 */
export function stepTraceparent(
  runId: string,
  stepSlug: string,
  runTraceparent: string | null | undefined,
): string {
  const trace = runTrace(runId, runTraceparent);
  const flags = trace.traceFlags.toString(16).padStart(2, "0");
  return `00-${trace.traceId}-${stepSpanId(runId, stepSlug)}-${flags}`;
}

const FNV_OFFSET = 0xcbf29ce484222325n;
const FNV_PRIME = 0x100000001b3n;
const MASK = 0xffffffffffffffffn;
const encoder = new TextEncoder();

/** 64-bit FNV-1a of the text, as 16 hex digits; never the invalid all-zero id. */
function spanIdOf(text: string): string {
  let hash = FNV_OFFSET;
  for (const byte of encoder.encode(text)) hash = ((hash ^ BigInt(byte)) * FNV_PRIME) & MASK;
  const id = hash.toString(16).padStart(16, "0");
  return id === INVALID_SPAN ? "0000000000000001" : id;
}
