/**
 * Sending events to waiting steps from the client (`client.sendEvent`): the address, the payload's
 * check against the step's schema, and the report `pgflow.send_event` returns (docs/waiting.md).
 *
 * @module
 */
import type { AnyFlow, FlowCarrier, StepOutput, StepSlug } from "../dsl/extract.ts";
import { checkInput, type InputIssue, inputIssues } from "../dsl/input_schema.ts";
import { jsonText } from "../util/json_write.ts";

/**
 * Where an event goes: one run (and, when its flow has several steps waiting for the same event,
 * `stepSlug`), or every run whose step's correlation key (its `key` path in the run input) is
 * `key`. `keepSeconds`: how long an event that finds no wait yet is kept (default a day, at most
 * 30 days).
 *
 * @example
 * ```ts
 * import type { EventAddress } from "@pgflow/shared";
 *
 * const toOrder: EventAddress = { key: "A-17" };
 * ```
 */
export type EventAddress =
  & ({ readonly runId: string; readonly stepSlug?: string } | { readonly key: string })
  & { readonly keepSeconds?: number };

/**
 * What an event did to one wait: `delivered` (the step completed with the payload), `kept` (the
 * step does not wait yet; delivered when it does, until `keepUntil`), `ignored` (`reason`: the
 * wait completed already, the run ended, an earlier event is kept) or `refused` (a token that is
 * unknown, used or expired).
 *
 * @example
 * ```ts
 * import type { EventDelivery } from "@pgflow/shared";
 *
 * const done = (d: EventDelivery) => d.status === "delivered";
 * ```
 */
export interface EventDelivery {
  /** The run, or `null` for a keyed event that found no wait. */
  readonly runId: string | null;
  /** The step, or `null` for a keyed event that found no wait. */
  readonly stepSlug: string | null;
  /** What happened. */
  readonly status: "delivered" | "kept" | "ignored" | "refused";
  /** Why it was ignored or refused. */
  readonly reason?: string;
  /** Until when a kept event is kept (ISO 8601). */
  readonly keepUntil?: string;
}

/**
 * The report of one `sendEvent`: one delivery per wait reached (a keyed event may reach many).
 *
 * @example
 * ```ts
 * import type { SendEventResult } from "@pgflow/shared";
 *
 * const reached = (r: SendEventResult) => r.results.filter((d) => d.status === "delivered").length;
 * ```
 */
export interface SendEventResult {
  /** The event name. */
  readonly event: string;
  /** One entry per wait (or one saying it was kept or ignored). */
  readonly results: readonly EventDelivery[];
}

/**
 * An event's payload failed the schema of the step it is for (`payload` of `.waitForEvent()`):
 * nothing was sent.
 *
 * @example
 * ```ts
 * import { EventPayloadError } from "@pgflow/shared";
 *
 * const refused = (e: unknown) => e instanceof EventPayloadError && e.issues.length > 0;
 * ```
 */
export class EventPayloadError extends Error {
  /** The issues the schema found. */
  readonly issues: readonly InputIssue[];

  /** The payload for `stepSlug` of `flowSlug` failed its schema with `issues`. */
  constructor(flowSlug: string, stepSlug: string, issues: readonly InputIssue[]) {
    super(
      `event for step ${stepSlug} of ${flowSlug}: payload failed its schema: ${
        issues.map((i) => `${i.path.length ? i.path.join(".") + ": " : ""}${i.message}`).join("; ")
      }`,
    );
    this.name = "EventPayloadError";
    this.issues = issues;
  }
}

/** The slugs of a flow's event steps (any step slug at the type level; checked at run time). */
export type EventStepSlug<F extends FlowCarrier> = StepSlug<F>;

/** The payload an event step of a flow takes: its output type. */
export type EventPayloadOf<F extends FlowCarrier, S extends StepSlug<F>> = StepOutput<F, S>;

/** An event ready for `pgflow.send_event`: its name, step (if known) and payload as JSON text. */
export interface PreparedEvent {
  readonly event: string;
  readonly stepSlug: string | null;
  readonly payload: string;
  /** The payload after the schema (its transforms applied). */
  readonly value: unknown;
}

/** Checks the address; throws a TypeError naming the bad value and the fix. */
export function checkAddress(to: EventAddress): void {
  const runId = (to as { runId?: unknown }).runId;
  const key = (to as { key?: unknown }).key;
  if ((runId === undefined) === (key === undefined)) {
    throw new TypeError(
      `sendEvent: pass exactly one of { runId } and { key }, got ${JSON.stringify(to)}`,
    );
  }
  if (runId !== undefined && (typeof runId !== "string" || !/^[0-9a-f-]{36}$/i.test(runId))) {
    throw new TypeError(`sendEvent: runId ${JSON.stringify(runId)} is not a UUID`);
  }
  if (key !== undefined && typeof key !== "string") {
    throw new TypeError(`sendEvent: key must be a string (the value at the step's key path)`);
  }
  const keep = to.keepSeconds;
  if (keep !== undefined && (!Number.isInteger(keep) || keep < 0 || keep > 30 * 86400)) {
    throw new TypeError(
      `sendEvent: keepSeconds ${
        JSON.stringify(keep)
      } must be a whole number from 0 to 2592000 (30 days)`,
    );
  }
}

/**
 * The event of `step` of `flow` (its name from the definition, its payload checked by the step's
 * schema), or of a bare event name (no check).
 */
export async function prepareEvent(
  target: AnyFlow | string,
  step: string | null,
  payload: unknown,
): Promise<PreparedEvent> {
  let event: string;
  let value = payload;
  if (typeof target === "string") {
    event = target;
  } else {
    const flow = target;
    const definition = flow.getStepDefinition(step as never);
    if (definition.wait?.kind !== "event") {
      throw new TypeError(
        `sendEvent: step ${step} of ${flow.slug} is not an event step (.waitForEvent()); ` +
          `event steps: ${
            flow.steps().filter((s) => s.wait?.kind === "event").map((s) => s.slug).join(", ") ||
            "none"
          }`,
      );
    }
    event = definition.wait.event;
    if (definition.payloadSchema !== undefined) {
      const checked = await checkInput(definition.payloadSchema, payload);
      if (!checked.ok) {
        throw new EventPayloadError(
          flow.slug,
          definition.slug,
          inputIssues(checked.issues, payload),
        );
      }
      value = checked.value;
    }
  }
  const text = jsonText(value === undefined ? null : value, "payload") ?? "null";
  return { event, stepSlug: step, payload: text, value: value ?? null };
}

/** `pgflow.send_event`'s document as the client's {@link SendEventResult}. */
export function toSendEventResult(doc: {
  event: string;
  results: {
    run_id: string | null;
    step_slug: string | null;
    status: EventDelivery["status"];
    reason?: string;
    keep_until?: string;
  }[];
}): SendEventResult {
  return {
    event: doc.event,
    results: doc.results.map((r) => ({
      runId: r.run_id,
      stepSlug: r.step_slug,
      status: r.status,
      ...(r.reason === undefined ? {} : { reason: r.reason }),
      ...(r.keep_until === undefined ? {} : { keepUntil: r.keep_until }),
    })),
  };
}
