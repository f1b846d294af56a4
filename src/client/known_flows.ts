/**
 * The flows a client was given (`createClient({ …, flows })`): what lets it check an input started
 * by name. A slug names its flow; an alias names the version it points at now, read from the
 * database at the start, since only an activation moves it.
 *
 * @module
 */
import type { AnyFlow } from "../dsl/extract.ts";
import { checkInput, inputIssues } from "../dsl/input_schema.ts";
import { ClientConfigError, InputValidationError, StartFlowError } from "./errors.ts";

/** Reads where an alias points now (`null`: there is no such alias). */
export type AliasReader = (alias: string) => Promise<string | null>;

/**
 * The flows a client knows by slug, and the aliases they carry.
 *
 * @example
 * ```ts
 * import { Flow } from "../dsl/flow.ts";
 * import { KnownFlows } from "./known_flows.ts";
 *
 * const v1 = new Flow<{ id: string }>({ slug: "order_v1", alias: "order" }).step({ slug: "a" }, () => 1);
 * const known = KnownFlows.from([v1], "createClient");
 * known.bySlug("order_v1") === v1; // true
 * ```
 */
export class KnownFlows {
  readonly #bySlug: ReadonlyMap<string, AnyFlow>;
  readonly #aliases: ReadonlySet<string>;

  private constructor(flows: ReadonlyMap<string, AnyFlow>) {
    this.#bySlug = flows;
    this.#aliases = new Set(
      [...flows.values()].map((f) => f.alias).filter((a): a is string => a !== undefined),
    );
  }

  /**
   * Checks and indexes `flows` (flows, routed or step-queued flows); `where` names the call in a
   * `ClientConfigError` for anything else, or for two flows with one slug.
   */
  static from(flows: unknown, where: string): KnownFlows {
    if (flows === undefined) return new KnownFlows(new Map());
    if (!Array.isArray(flows)) {
      throw new ClientConfigError(
        `${where}: flows must be an array of flows (the versions this client starts by name), ` +
          `got ${flows === null ? "null" : typeof flows}`,
      );
    }
    const bySlug = new Map<string, AnyFlow>();
    for (const [i, carrier] of flows.entries()) {
      const flow = unwrap(carrier);
      if (flow === undefined) {
        throw new ClientConfigError(
          `${where}: flows[${i}] is not a flow; pass Flow, routeFlow(...) or withStepQueues(...) ` +
            "values",
        );
      }
      const seen = bySlug.get(flow.slug);
      if (seen !== undefined && seen !== flow) {
        throw new ClientConfigError(
          `${where}: flows holds two different flows with slug ${JSON.stringify(flow.slug)}; ` +
            "give each version once",
        );
      }
      bySlug.set(flow.slug, flow);
    }
    return new KnownFlows(bySlug);
  }

  /** Whether no flow was given. */
  get empty(): boolean {
    return this.#bySlug.size === 0;
  }

  /** The flow given with this slug, if any. */
  bySlug(slug: string): AnyFlow | undefined {
    return this.#bySlug.get(slug);
  }

  /**
   * The flow whose input schema a start of `name` must pass: for the name of an alias a given flow
   * carries, the version the alias points at now (when it was given); for a slug, its flow.
   * `undefined` when the client was given none of them: the worker still checks the input.
   */
  async forStart(name: string, readAlias: AliasReader): Promise<AnyFlow | undefined> {
    // The database resolves an alias before a slug, and so does this.
    if (this.#aliases.has(name)) {
      const target = await readAlias(name);
      if (target !== null) return this.#bySlug.get(target);
    }
    return this.#bySlug.get(name);
  }
}

function unwrap(carrier: unknown): AnyFlow | undefined {
  if (carrier === null || typeof carrier !== "object") return undefined;
  const inner = (carrier as { flow?: unknown }).flow;
  const flow = inner !== undefined ? inner : carrier;
  return flow !== null && typeof flow === "object" &&
      typeof (flow as { slug?: unknown }).slug === "string" &&
      typeof (flow as { getStepDefinition?: unknown }).getStepDefinition === "function"
    ? flow as AnyFlow
    : undefined;
}

/**
 * The input to send for a run of `flow` (`undefined`: a flow the client does not know, so the
 * input goes as given and the worker checks it): as given for a flow without a schema; for one
 * with, the schema's value (a schema may transform: defaults, trims, coercions), so the stored
 * input is what the flow's type says. Rejects with `InputValidationError` when the schema finds
 * issues, naming `name` (the slug or alias started).
 *
 * @example
 * ```ts
 * import { checkedInput } from "./known_flows.ts";
 *
 * // const value = await checkedInput(flow, "order", { id: 7 });
 * ```
 */
export async function checkedInput(
  flow: AnyFlow | undefined,
  name: string,
  input: unknown,
): Promise<unknown> {
  const schema = flow?.inputSchema;
  if (schema === undefined) return input;
  let check;
  try {
    check = await checkInput(schema, input);
  } catch (error) {
    throw new StartFlowError(
      name,
      `the input schema threw: ${error instanceof Error ? error.message : String(error)}`,
      undefined,
      { cause: error },
    );
  }
  if (!check.ok) throw new InputValidationError(name, inputIssues(check.issues, input));
  return check.value;
}
