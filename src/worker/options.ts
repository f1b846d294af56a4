import { DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { EdgeWorkerConfig } from "./config.ts";
import { DEFAULT_MAX_PAYLOAD_BYTES, JSONB_MAX_BYTES } from "../util/payload_limit.ts";

/**
 * The names of the worker's numeric options: every `number` property of `EdgeWorkerConfig`.
 *
 * @example
 * ```ts
 * import type { NumericOptionName } from "@pgflow/shared/tools";
 *
 * const name: NumericOptionName = "maxConcurrent";
 * ```
 */
export type NumericOptionName = {
  [K in keyof EdgeWorkerConfig]-?: NonNullable<EdgeWorkerConfig[K]> extends number ? K : never;
}[keyof EdgeWorkerConfig];

/**
 * An integer option: its default and its inclusive range.
 *
 * @example
 * ```ts
 * import type { IntegerOption } from "@pgflow/shared/tools";
 *
 * const describe = (o: IntegerOption) => `${o.default}${o.unit} (${o.min}–${o.max})`;
 * ```
 */
export interface IntegerOption {
  /** The value when the option is not set. */
  readonly default: number;
  /** The smallest value accepted. */
  readonly min: number;
  /** The largest value accepted. */
  readonly max: number;
  /** The unit, for docs and errors. */
  readonly unit: "" | "ms" | "s" | "bytes";
}

/**
 * The one table of the worker's numeric options: `resolveConfig` validates and defaults from it,
 * the benchmarks take their defaults from it, and a test checks that `EdgeWorkerConfig`'s docs say
 * the same defaults. The type makes it name exactly the numeric options of `EdgeWorkerConfig`.
 *
 * @example
 * ```ts
 * import { WORKER_OPTIONS } from "@pgflow/shared/tools";
 *
 * console.log(WORKER_OPTIONS.maxConcurrent.default); // 10
 * ```
 */
export const WORKER_OPTIONS: { readonly [K in NumericOptionName]: IntegerOption } = Object.freeze(
  {
    maxConcurrent: { default: 10, min: 1, max: 1000, unit: "" },
    batchSize: { default: 10, min: 1, max: 1000, unit: "" },
    visibilityTimeout: { default: 5, min: 1, max: 3600, unit: "s" },
    maxPollSeconds: { default: 2, min: 1, max: 60, unit: "s" },
    pollIntervalMs: { default: 50, min: 10, max: 10_000, unit: "ms" },
    maxPgConnections: { default: 4, min: 2, max: 100, unit: "" },
    heartbeatIntervalMs: { default: 5000, min: 100, max: 60_000, unit: "ms" },
    stalledRecoveryIntervalMs: { default: 15_000, min: 0, max: 3_600_000, unit: "ms" },
    scheduleTickIntervalMs: { default: 1000, min: 0, max: 3_600_000, unit: "ms" },
    queryTimeoutMs: { default: DEFAULT_QUERY_TIMEOUT_MS, min: 500, max: 600_000, unit: "ms" },
    logSummaryIntervalMs: { default: 60_000, min: 100, max: 3_600_000, unit: "ms" },
    shutdownTimeoutMs: { default: 30_000, min: 0, max: 3_600_000, unit: "ms" },
    maxPayloadBytes: {
      default: DEFAULT_MAX_PAYLOAD_BYTES,
      min: 1024,
      max: JSONB_MAX_BYTES,
      unit: "bytes",
    },
  } as const,
);
