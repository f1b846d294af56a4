/**
 * The client's options, declared once: the numeric ones in tables (default and inclusive range),
 * checked by {@link resolveClientOptions} for `createClient` and by {@link resolveWaitOptions} and
 * {@link checkEventsOptions} for a run handle's calls. Every refusal is a `ClientConfigError`
 * naming the call, the option, the value and what is accepted.
 *
 * @module
 */
import { DEFAULT_QUERY_TIMEOUT_MS } from "../platform/deadline.ts";
import type { PoolOptions } from "../platform/pool.ts";
import { jsonText } from "../util/json_write.ts";
import type { Sql, SupabaseClient } from "../platform/types.ts";
import type { RunFilter } from "./backend.ts";
import type {
  ClientOptions,
  ClientTiming,
  ListRunsOptions,
  StartFlowOptions,
  StartFlowsOptions,
} from "./client.ts";
import { ClientConfigError } from "./errors.ts";
import { KnownFlows } from "./known_flows.ts";
import { inRange, parseIsoTime } from "./since.ts";
import type { EventsOptions, RetryOptions, WaitForOptions } from "./run_handle.ts";
import type { WatchTiming } from "./watch.ts";

/** A whole number of milliseconds: its default and its inclusive range. */
export interface MillisecondsOption {
  readonly default: number;
  readonly min: number;
  readonly max: number;
}

/**
 * The one table of `createClient`'s numeric options (the keys of `ClientTiming`; the type makes
 * it name exactly those). The docs' table and `ClientTiming`'s JSDoc are tested against it.
 */
export const CLIENT_OPTIONS: { readonly [K in keyof Required<ClientTiming>]: MillisecondsOption } =
  Object.freeze(
    {
      pollIntervalMs: { default: 250, min: 10, max: 60_000 },
      maxPollIntervalMs: { default: 2_000, min: 10, max: 600_000 },
      safetyIntervalMs: { default: 5_000, min: 100, max: 3_600_000 },
      // The worker's bounds: a query bound shorter than half a second fails on a busy server.
      queryTimeoutMs: { default: DEFAULT_QUERY_TIMEOUT_MS, min: 500, max: 600_000 },
    } as const,
  );

/**
 * The numeric options of `run.waitFor`. A timer longer than 2^31 - 1 ms (about 24.8 days) fires
 * at once, so that is the longest wait.
 */
export const WAIT_OPTIONS: { readonly timeoutMs: MillisecondsOption } = Object.freeze(
  {
    timeoutMs: { default: 300_000, min: 1, max: 2_147_483_647 },
  } as const,
);

/** How the client connects, checked: exactly one of the three ways. */
export type ResolvedConnection =
  | {
    readonly kind: "sql";
    readonly sql: Sql;
    readonly url?: string;
    readonly transport: "auto" | "listen" | "poll";
  }
  | {
    readonly kind: "connectionString";
    readonly connectionString: string;
    readonly pool: PoolOptions;
    readonly transport: "auto" | "listen" | "poll";
  }
  | {
    readonly kind: "supabase";
    readonly supabase: SupabaseClient;
    readonly transport: "auto" | "realtime" | "poll";
  };

/** `createClient`'s options with every default applied and every value checked. */
export interface ResolvedClientOptions {
  readonly timing: WatchTiming;
  readonly queryTimeoutMs: number;
  readonly connection: ResolvedConnection;
  /** The flows given (`flows`), which check inputs started by slug or alias. */
  readonly flows: KnownFlows;
}

const CONNECTIONS = ["sql", "connectionString", "supabase"] as const;
/** The options each way of connecting takes besides the timing ones. */
const OWN_OPTIONS: { readonly [K in ResolvedConnection["kind"]]: readonly string[] } = {
  sql: ["sql", "url", "transport"],
  connectionString: ["connectionString", "pool", "transport"],
  supabase: ["supabase", "transport"],
};
const TRANSPORTS: { readonly [K in ResolvedConnection["kind"]]: readonly string[] } = {
  sql: ["auto", "listen", "poll"],
  connectionString: ["auto", "listen", "poll"],
  supabase: ["auto", "realtime", "poll"],
};

/**
 * Applies defaults to `createClient`'s options and checks every one, throwing a
 * {@link ClientConfigError} that names the option, the value and what is accepted.
 */
export function resolveClientOptions(options: ClientOptions): ResolvedClientOptions {
  const where = "createClient";
  if (!isObject(options)) {
    throw new ClientConfigError(`${where}: options must be an object, got ${typeOf(options)}`);
  }
  const given = CONNECTIONS.filter((key) =>
    (options as Record<string, unknown>)[key] !== undefined
  );
  if (given.length !== 1) {
    throw new ClientConfigError(
      given.length === 0
        ? `${where} needs { sql }, { connectionString } or { supabase }, for example ` +
          `createClient({ connectionString: Deno.env.get("DATABASE_URL")! })`
        : `${where}: give one of sql, connectionString or supabase, got ${given.join(" and ")}`,
    );
  }
  const kind = given[0];
  const own = OWN_OPTIONS[kind];
  for (const key of Object.keys(options)) {
    if (key in CLIENT_OPTIONS || key === "flows" || own.includes(key)) continue;
    const owner = CONNECTIONS.find((k) => OWN_OPTIONS[k].includes(key));
    throw new ClientConfigError(
      owner === undefined
        ? `${where}: unknown option ${JSON.stringify(key)}; the options are ` +
          `${[...Object.keys(CLIENT_OPTIONS), "flows", ...own].join(", ")}`
        : `${where}: ${key} goes with ${owner}, not with ${kind}`,
    );
  }
  const numbers = Object.fromEntries(
    (Object.keys(CLIENT_OPTIONS) as (keyof ClientTiming)[]).map((key) => [
      key,
      milliseconds(where, key, options[key], CLIENT_OPTIONS[key]),
    ]),
  ) as { readonly [K in keyof ClientTiming]-?: number };
  if (numbers.pollIntervalMs > numbers.maxPollIntervalMs) {
    throw new ClientConfigError(
      `${where}: pollIntervalMs (${numbers.pollIntervalMs}) must not exceed maxPollIntervalMs ` +
        `(${numbers.maxPollIntervalMs}); the wait starts at the one and doubles up to the other`,
    );
  }
  const { queryTimeoutMs, ...timing } = numbers;
  return Object.freeze({
    timing,
    queryTimeoutMs,
    connection: connection(options, kind),
    flows: KnownFlows.from((options as { flows?: unknown }).flows, where),
  });
}

function connection(
  o: Readonly<Record<string, unknown>>,
  kind: ResolvedConnection["kind"],
): ResolvedConnection {
  const where = "createClient";
  const transport = o.transport ?? "auto";
  if (typeof transport !== "string" || !TRANSPORTS[kind].includes(transport)) {
    throw new ClientConfigError(
      `${where}: transport with ${kind} must be ${alternatives(TRANSPORTS[kind])}, ` +
        `got ${describe(transport)}`,
    );
  }
  // The connection itself is named by its type only: a string here may hold a password.
  if (kind === "sql") {
    if (typeof o.sql !== "function") {
      throw new ClientConfigError(
        `${where}: sql must be a postgres.js pool (createPool), got ${typeOf(o.sql)}`,
      );
    }
    if (o.url !== undefined && typeof o.url !== "string") {
      throw new ClientConfigError(`${where}: url must be a string, got ${typeOf(o.url)}`);
    }
    return {
      kind,
      sql: o.sql as Sql,
      url: o.url as string | undefined,
      transport: transport as "auto" | "listen" | "poll",
    };
  }
  if (kind === "connectionString") {
    if (typeof o.connectionString !== "string") {
      throw new ClientConfigError(
        `${where}: connectionString must be a string, got ${typeOf(o.connectionString)}`,
      );
    }
    if (o.pool !== undefined && !isObject(o.pool)) {
      throw new ClientConfigError(
        `${where}: pool must be an object of createPool options, got ${typeOf(o.pool)}`,
      );
    }
    return {
      kind,
      connectionString: o.connectionString,
      pool: (o.pool ?? {}) as PoolOptions,
      transport: transport as "auto" | "listen" | "poll",
    };
  }
  if (!isObject(o.supabase) || typeof o.supabase.schema !== "function") {
    throw new ClientConfigError(
      `${where}: supabase must be a supabase-js client (createClient of ` +
        `@supabase/supabase-js), got ${typeOf(o.supabase)}`,
    );
  }
  return {
    kind,
    supabase: o.supabase as unknown as SupabaseClient,
    transport: transport as "auto" | "realtime" | "poll",
  };
}

/** `run.waitFor`'s options, defaults applied and checked. */
export function resolveWaitOptions(
  options: WaitForOptions | undefined,
): { readonly timeoutMs: number; readonly signal?: AbortSignal } {
  const where = "waitFor";
  if (options === undefined) return { timeoutMs: WAIT_OPTIONS.timeoutMs.default };
  knownKeys(where, options, ["timeoutMs", "signal"]);
  const o = options as Record<string, unknown>;
  return {
    timeoutMs: milliseconds(where, "timeoutMs", o.timeoutMs, WAIT_OPTIONS.timeoutMs),
    signal: abortSignal(where, o.signal),
  };
}

/** `client.startFlow`'s options, checked for shape (the `runId` itself is checked by `startFlow`). */
export function checkStartOptions(options: StartFlowOptions | undefined): StartFlowOptions {
  if (options === undefined) return {};
  knownKeys("startFlow", options, ["runId", "priority"]);
  return options;
}

/** `client.startFlows`'s options, checked for shape (the priority is checked by `startFlows`). */
export function checkStartManyOptions(
  options: StartFlowsOptions | undefined,
): StartFlowsOptions {
  if (options === undefined) return {};
  knownKeys("startFlows", options, ["priority"]);
  return options;
}

/** The statuses `listRuns` filters on. */
const RUN_STATUSES = ["started", "completed", "failed", "cancelled"] as const;

/**
 * `client.listRuns`'s options, checked, as the filter of `pgflow.list_runs` (`flowSlug` is
 * resolved by the caller, which knows flows).
 */
export function checkListRunsOptions(
  options: ListRunsOptions | undefined,
  flowSlug: string | null,
): RunFilter {
  const where = "listRuns";
  const o: Record<string, unknown> = options === undefined ? {} : options as never;
  knownKeys(where, o, ["flow", "status", "since", "runIdPrefix", "limit", "restarted"]);
  const status = o.status ?? null;
  if (status !== null && !RUN_STATUSES.includes(status as never)) {
    throw new ClientConfigError(
      `${where}: status must be ${alternatives(RUN_STATUSES)}, got ${describe(status)}`,
    );
  }
  let since: string | null = null;
  if (o.since !== undefined && o.since !== null) {
    const time = o.since instanceof Date
      ? inRange(o.since.getTime())
      : typeof o.since === "string"
      ? parseIsoTime(o.since)
      : undefined;
    if (time === undefined || !time.ok) {
      throw new ClientConfigError(
        `${where}: since ${sinceText(o.since)} ${
          time?.problem ?? "is neither a Date nor a string"
        }; pass a Date or an ISO time such as "2026-12-01T08:00:00Z"`,
      );
    }
    since = time.time.toISOString();
  }
  const prefix = o.runIdPrefix ?? null;
  if (prefix !== null && (typeof prefix !== "string" || !/^[0-9a-f-]{1,36}$/i.test(prefix))) {
    throw new ClientConfigError(
      `${where}: runIdPrefix must be the start of a run id (1 to 36 hex digits and dashes), got ` +
        describe(prefix),
    );
  }
  const limit = o.limit ?? 50;
  if (typeof limit !== "number" || !Number.isInteger(limit) || limit < 1 || limit > 1000) {
    throw new ClientConfigError(
      `${where}: limit must be an integer from 1 to 1000, got ${describe(limit)}`,
    );
  }
  const restarted = o.restarted ?? null;
  if (restarted !== null && typeof restarted !== "boolean") {
    throw new ClientConfigError(
      `${where}: restarted must be true or false, got ${describe(restarted)}`,
    );
  }
  return {
    flowSlug,
    status: status as RunFilter["status"],
    since,
    runIdPrefix: prefix === null ? null : (prefix as string).toLowerCase(),
    limit,
    restarted,
  };
}

/**
 * `run.retry`'s and `run.resume`'s options, checked, with their default; `input` (retry only) as
 * the JSON text to send, `null` for the source's input.
 */
export function checkRestartOptions(
  where: "retry" | "resume",
  options: RetryOptions | undefined,
): { readonly again: boolean; readonly input: string | null } {
  if (options === undefined) return { again: true, input: null };
  if (where === "resume" && isObject(options) && "input" in options) {
    throw new ClientConfigError(
      "resume: input is for retry only; a resume reuses what the source computed from its " +
        "input. To run with another input, retry({ input })",
    );
  }
  knownKeys(where, options, where === "retry" ? ["again", "input"] : ["again"]);
  const o = options as Record<string, unknown>;
  const again = o.again ?? true;
  if (typeof again !== "boolean") {
    throw new ClientConfigError(`${where}: again must be true or false, got ${describe(again)}`);
  }
  if (o.input === undefined) return { again, input: null };
  let input: string | undefined;
  try {
    // As startFlow's: what jsonb would store as something else or refuse fails here, by path.
    input = jsonText(o.input, "input");
  } catch (error) {
    throw new ClientConfigError(`${where}: ${(error as Error).message}`);
  }
  if (input === undefined) {
    throw new ClientConfigError(`${where}: input must be a JSON value, got ${typeOf(o.input)}`);
  }
  return { again, input };
}

/** `run.events`'s options, checked. */
export function checkEventsOptions(
  options: EventsOptions | undefined,
): { readonly signal?: AbortSignal } {
  if (options === undefined) return {};
  knownKeys("events", options, ["signal"]);
  return { signal: abortSignal("events", (options as Record<string, unknown>).signal) };
}

function knownKeys(where: string, options: unknown, known: readonly string[]): void {
  if (!isObject(options)) {
    throw new ClientConfigError(`${where}: options must be an object, got ${describe(options)}`);
  }
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) {
      throw new ClientConfigError(
        `${where}: unknown option ${JSON.stringify(key)}; the options are ${known.join(", ")}`,
      );
    }
  }
}

function milliseconds(
  where: string,
  key: string,
  value: unknown,
  { default: fallback, min, max }: MillisecondsOption,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isInteger(value) || value < min || value > max) {
    throw new ClientConfigError(
      `${where}: ${key} must be an integer from ${min} to ${max}, got ${describe(value)}`,
    );
  }
  return value;
}

function abortSignal(where: string, value: unknown): AbortSignal | undefined {
  if (value === undefined || value instanceof AbortSignal) return value;
  throw new ClientConfigError(`${where}: signal must be an AbortSignal, got ${describe(value)}`);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function alternatives(values: readonly string[]): string {
  const quoted = values.map((v) => JSON.stringify(v));
  return `${quoted.slice(0, -1).join(", ")} or ${quoted.at(-1)}`;
}

/** A `since` value for an error message (a Date as its ISO time, when it has one). */
function sinceText(value: unknown): string {
  if (!(value instanceof Date)) return describe(value);
  return Number.isNaN(value.getTime()) ? "Invalid Date" : `Date ${value.toISOString()}`;
}

/** A value for an error message: numbers, booleans and short strings as they are. */
function describe(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) {
    return String(value);
  }
  return typeOf(value);
}

/** Only the kind of a value, for options that may carry a secret (a URL, a pool). */
function typeOf(value: unknown): string {
  if (value === null || value === undefined) return String(value);
  if (Array.isArray(value)) return "an array";
  const type = typeof value;
  return `${/^[aeiou]/.test(type) ? "an" : "a"} ${type}`;
}
