/**
 * Schedules through the client: `client.schedules.create / update / pause / resume / delete /
 * list`, each one call of the SQL function of the same name (supabase/schemas/0270_schedules.sql).
 * The database checks the cron expression, time zone and flow; its refusal becomes a
 * `ScheduleError` with its message and hint.
 *
 * @module
 */
import type { Json } from "../dsl/json.ts";
import { jsonText } from "../util/json_write.ts";
import { parseJson } from "../util/json_parse.ts";
import type { FlowCarrier } from "../dsl/extract.ts";
import type { FlowInputOf } from "./types.ts";

/**
 * What a schedule starts and when: exactly one of `cron` and `every`.
 *
 * @example
 * ```ts
 * import type { ScheduleSpec } from "@pgflow/shared";
 *
 * const nightly: ScheduleSpec<{ full: boolean }> = {
 *   name: "nightly_report",
 *   cron: "0 2 * * *",
 *   timeZone: "Europe/Paris",
 *   input: { full: true },
 * };
 * ```
 */
export interface ScheduleSpec<I> {
  /** The schedule's name: letters, digits and single underscores. */
  readonly name: string;
  /** Five cron fields (minute hour day-of-month month day-of-week), on `timeZone`'s clock. */
  readonly cron?: string;
  /** Instead of `cron`: a Postgres interval of whole seconds (`"1 second"`, `"15 minutes"`). */
  readonly every?: string;
  /** An IANA time zone for `cron`; default `UTC`. */
  readonly timeZone?: string;
  /** Each run's input. */
  readonly input: I;
  /** Add the tick's time (ISO 8601, UTC) to the input under this key (the input is an object). */
  readonly tickKey?: string;
  /** After an outage, how many of the latest missed ticks start runs; default 1. */
  readonly catchUp?: number;
  /** Create it paused. */
  readonly paused?: boolean;
}

/**
 * Changes to a schedule: a part left out is kept. `cron` replaces `every` and the reverse;
 * `tickKey: null` removes the key.
 *
 * @example
 * ```ts
 * import type { ScheduleChanges } from "@pgflow/shared";
 *
 * const hourly: ScheduleChanges = { cron: "0 * * * *", catchUp: 3 };
 * ```
 */
export interface ScheduleChanges {
  /** Another flow or alias to start. */
  readonly flow?: FlowCarrier | string;
  /** A new cron expression (replaces `every`). */
  readonly cron?: string;
  /** A new interval (replaces `cron`). */
  readonly every?: string;
  /** A new time zone for the cron expression. */
  readonly timeZone?: string;
  /** A new input for the runs. */
  readonly input?: Json;
  /** A new tick key; `null` removes it. */
  readonly tickKey?: string | null;
  /** A new catch-up limit (1 to 1000). */
  readonly catchUp?: number;
}

/**
 * A schedule as the database holds it.
 *
 * @example
 * ```ts
 * import type { Schedule } from "@pgflow/shared";
 *
 * const due = (s: Schedule) => !s.paused && s.nextTickAt !== null;
 * ```
 */
export interface Schedule {
  /** Its name. */
  readonly name: string;
  /** The flow slug or alias it starts. */
  readonly flow: string;
  /** Its cron expression, or `null` for an interval schedule. */
  readonly cron: string | null;
  /** Its interval in seconds, or `null` for a cron schedule. */
  readonly everySeconds: number | null;
  /** The time zone its cron expression is read in. */
  readonly timeZone: string;
  /** Each run's input (before the tick key is added). */
  readonly input: Json;
  /** The key the tick's time is added under, if any. */
  readonly tickKey: string | null;
  /** How many of the latest missed ticks start runs after an outage. */
  readonly catchUp: number;
  /** Whether it is paused. */
  readonly paused: boolean;
  /** The next tick (ISO time); `null` while paused. */
  readonly nextTickAt: string | null;
  /** The latest tick considered (ISO time): fired, or skipped by the catch-up policy. */
  readonly lastTickAt: string | null;
  /** The run the last fired tick started. */
  readonly lastRunId: string | null;
  /** Why the last tick's run did not start, if it did not. */
  readonly lastError: string | null;
  /** Ticks skipped after outages, by the catch-up policy. */
  readonly skippedTicks: number;
  /** When it was created (ISO time). */
  readonly createdAt: string;
  /** When it was last changed (ISO time). */
  readonly updatedAt: string;
}

/**
 * `client.schedules`: schedules of the client's database.
 *
 * @example
 * ```ts
 * import { createClient } from "@pgflow/shared";
 *
 * const client = createClient({ connectionString: "postgres://postgres@127.0.0.1:5432/postgres" });
 * // await client.schedules.create("report", { name: "hourly", cron: "0 * * * *", input: {} });
 * // await client.schedules.pause("hourly");
 * await client.close();
 * ```
 */
export interface ScheduleClient {
  /** Creates a schedule of `flow` (a flow, or a slug or alias); its first tick is after now. */
  create<F extends FlowCarrier = never>(
    flow: F | string,
    spec: ScheduleSpec<FlowInputOf<F>>,
  ): Promise<Schedule>;
  /** Changes a schedule; its next tick is recomputed from now. */
  update(name: string, changes: ScheduleChanges): Promise<Schedule>;
  /** Pauses it: no tick fires until it is resumed. */
  pause(name: string): Promise<Schedule>;
  /** Resumes it from its next tick after now. */
  resume(name: string): Promise<Schedule>;
  /** Deletes it and its tick history (its runs stay); `false` when there was none. */
  delete(name: string): Promise<boolean>;
  /** Every schedule, by name. */
  list(): Promise<Schedule[]>;
}

/**
 * The database refused a schedule call: a bad cron expression, time zone or flow, a name taken
 * or unknown. `message` and `hint` are the database's; `code` its SQLSTATE (`22023` bad value,
 * `23505` name taken, `P0002` no such schedule).
 *
 * @example
 * ```ts
 * import { ScheduleError } from "@pgflow/shared";
 *
 * const isUnknown = (e: unknown) => e instanceof ScheduleError && e.code === "P0002";
 * ```
 */
export class ScheduleError extends Error {
  /** Always `ScheduleError`. */
  override readonly name = "ScheduleError";
  /** The database's message, its SQLSTATE and its hint. */
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly hint: string | undefined,
    options?: ErrorOptions,
  ) {
    super(hint ? `${message} (${hint})` : message, options);
  }
}

/** The SQL functions `client.schedules` calls. */
export type ScheduleCall =
  | "create_schedule"
  | "update_schedule"
  | "pause_schedule"
  | "resume_schedule"
  | "delete_schedule"
  | "list_schedules";

/** A named argument of a schedule call: its SQL type and value (`input` as JSON text). */
export type ScheduleArgs = Readonly<
  Record<
    string,
    {
      readonly type: "text" | "jsonb" | "interval" | "integer" | "boolean";
      readonly value: string | number | boolean | null;
    }
  >
>;

/** What `client.schedules` needs from the backend: one schedule call, its result. */
export type CallSchedule = (call: ScheduleCall, args: ScheduleArgs) => Promise<unknown>;

/** The row `pgflow.list_schedules()` and the write functions return. */
interface ScheduleRow {
  schedule: string;
  flow: string;
  cron: string | null;
  every_seconds: number | null;
  time_zone: string;
  input: Json;
  input_text?: string;
  tick_key: string | null;
  catch_up: number;
  paused: boolean;
  next_tick_at: string | null;
  last_tick_at: string | null;
  last_run_id: string | null;
  last_error: string | null;
  skipped_ticks: number;
  created_at: string;
  updated_at: string;
}

function toSchedule(row: ScheduleRow): Schedule {
  return {
    name: row.schedule,
    flow: row.flow,
    cron: row.cron,
    everySeconds: row.every_seconds,
    timeZone: row.time_zone,
    // input_text when the database sent it: read exactly, whichever parser read the row.
    input: row.input_text === undefined ? row.input : parseJson(row.input_text),
    tickKey: row.tick_key,
    catchUp: row.catch_up,
    paused: row.paused,
    nextTickAt: row.next_tick_at,
    lastTickAt: row.last_tick_at,
    lastRunId: row.last_run_id,
    lastError: row.last_error,
    skippedTicks: Number(row.skipped_ticks),
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}

function inputText(input: unknown, where: string): string {
  const text = jsonText(input, "input");
  if (text === undefined) {
    throw new ScheduleError(`${where}: input is undefined`, undefined, "pass {} for none");
  }
  return text;
}

/**
 * Makes `client.schedules` over one backend call; `slugOf` names a flow given as an object.
 *
 * @example
 * ```ts
 * import { scheduleClient } from "./schedules.ts";
 *
 * const schedules = scheduleClient(async () => [], (f) => String(f));
 * ```
 */
export function scheduleClient(
  call: CallSchedule,
  slugOf: (flow: FlowCarrier | string) => string,
): ScheduleClient {
  const run = async (fn: ScheduleCall, args: ScheduleArgs): Promise<unknown> => {
    try {
      return await call(fn, args);
    } catch (error) {
      const e = error as { message?: string; code?: string; hint?: string };
      if (!["22023", "23505", "P0002", "22007"].includes(e.code ?? "")) throw error;
      throw new ScheduleError(e.message ?? String(error), e.code, e.hint, { cause: error });
    }
  };
  const one = async (fn: ScheduleCall, args: ScheduleArgs) =>
    toSchedule(await run(fn, args) as ScheduleRow);
  const text = (value: string | null | undefined) => ({
    type: "text" as const,
    value: value ?? null,
  });
  return {
    create(flow, spec) {
      return one("create_schedule", {
        schedule_name: text(spec.name),
        flow_slug: text(slugOf(flow)),
        cron: text(spec.cron),
        input: { type: "jsonb", value: inputText(spec.input, `schedule ${spec.name}`) },
        time_zone: text(spec.timeZone ?? "UTC"),
        every: { type: "interval", value: spec.every ?? null },
        tick_key: text(spec.tickKey),
        catch_up: { type: "integer", value: spec.catchUp ?? 1 },
        paused: { type: "boolean", value: spec.paused ?? false },
      });
    },
    update(name, changes) {
      return one("update_schedule", {
        schedule_name: text(name),
        flow_slug: text(changes.flow === undefined ? null : slugOf(changes.flow)),
        cron: text(changes.cron),
        input: {
          type: "jsonb",
          value: changes.input === undefined ? null : inputText(changes.input, `schedule ${name}`),
        },
        time_zone: text(changes.timeZone),
        every: { type: "interval", value: changes.every ?? null },
        tick_key: text(changes.tickKey === null ? "" : changes.tickKey),
        catch_up: { type: "integer", value: changes.catchUp ?? null },
      });
    },
    pause: (name) => one("pause_schedule", { schedule_name: text(name) }),
    resume: (name) => one("resume_schedule", { schedule_name: text(name) }),
    async delete(name) {
      return await run("delete_schedule", { schedule_name: text(name) }) === true;
    },
    async list() {
      return (await run("list_schedules", {}) as ScheduleRow[]).map(toSchedule);
    },
  };
}
