import type { AnyFlow } from "../dsl/extract.ts";
import type { AnyStepHandler, StepDefinition } from "../dsl/types.ts";
import type { StandardSchemaV1 } from "../dsl/input_schema.ts";
import { pairKey } from "../util/pair_key.ts";

/** The handler of one (flow, step) pair, as dispatch needs it. */
export interface RegisteredStep {
  /** The concrete flow slug. */
  readonly flowSlug: string;
  /** The step's definition (slug, kind, handler, ...). */
  readonly step: StepDefinition;
  /** The handler. */
  readonly handler: AnyStepHandler;
  /** The flow's input schema, if it has one: the run input is checked before the handler runs. */
  readonly inputSchema: StandardSchemaV1 | undefined;
  /** The step's effective timeout in seconds: its own, else the flow's, else SQL's default. */
  readonly timeoutSeconds: number;
}

/** SQL's timeout for a flow that sets none (`pgflow.flow_option_default('timeout')`). */
export const DEFAULT_TIMEOUT_SECONDS = 60;

/**
 * Handlers by (flow, step): a claimed task is dispatched by the flow and step the claim returned,
 * never by anything in the message body.
 */
export class HandlerRegistry {
  readonly #steps = new Map<string, RegisteredStep>();

  /** Registers every step of each flow. */
  constructor(flows: readonly AnyFlow[]) {
    for (const flow of flows) {
      for (const step of flow.steps()) {
        this.#steps.set(pairKey(flow.slug, step.slug), {
          flowSlug: flow.slug,
          step,
          handler: step.handler,
          inputSchema: flow.inputSchema,
          timeoutSeconds: step.options.timeout ?? flow.options.timeout ?? DEFAULT_TIMEOUT_SECONDS,
        });
      }
    }
  }

  /** The handler for (flow, step), if this worker has one. */
  get(flowSlug: string, stepSlug: string): RegisteredStep | undefined {
    return this.#steps.get(pairKey(flowSlug, stepSlug));
  }
}
