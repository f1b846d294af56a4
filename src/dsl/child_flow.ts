/**
 * Child-flow steps: how `.subflow()` and `.subflowMap()` describe the flow they run and turn the
 * step's input into the child's input without a worker.
 *
 * The input function is called once, when the flow is defined, with a stand-in input that records
 * which paths it reads. What it returns (objects, arrays and constants around those reads) becomes
 * a JSON template with references, which SQL fills from each task's real input when the step is
 * ready, in the same transaction that starts the child. So a child starts with no worker, no
 * message and no handler, and the mapping is part of the compiled shape. Computing on the values
 * (arithmetic, string templates, method calls) cannot be replayed in SQL and is refused with an
 * error saying so: compute in a step before, and pick its output.
 *
 * @module
 */
import { FlowDefinitionError } from "./errors.ts";
import type { Json } from "./json.ts";

/**
 * A child-flow step's input mapping as compiled: a JSON template and the references that fill it,
 * each `[path in the template, path in the task's input]` (object keys and array indexes, as
 * strings).
 *
 * @example
 * ```ts
 * import type { ChildInputMapping } from "@pgflow/shared";
 *
 * // (deps) => ({ id: deps.fetch.customer.id, source: "import" })
 * const mapping: ChildInputMapping = {
 *   template: { id: null, source: "import" },
 *   refs: [[["id"], ["fetch", "customer", "id"]]],
 * };
 * ```
 */
export interface ChildInputMapping {
  /** The child's input with `null` where each reference goes. */
  readonly template: Json;
  /** `[where in the template, where in the task's input]`, in the order they are filled. */
  readonly refs: readonly (readonly [readonly string[], readonly string[]])[];
}

/**
 * What a child-flow step runs: the child flow's slug (or alias) and the input mapping, if any.
 *
 * @example
 * ```ts
 * import type { ChildFlowDefinition } from "@pgflow/shared";
 *
 * const child: ChildFlowDefinition = { flow: "enrich_account_v1", input: null };
 * ```
 */
export interface ChildFlowDefinition {
  /** The concrete slug, or the alias when the step starts the child through it. */
  readonly flow: string;
  /** How the child's input is built from the task's input; `null`: the task's input as it is. */
  readonly input: ChildInputMapping | null;
}

const paths = new WeakMap<object, readonly string[]>();

function recorder(path: readonly string[], where: string): unknown {
  const refuse = (): never => {
    throw new FlowDefinitionError(
      `${where}: the input function may only pick values (deps.step.field) and place them in ` +
        `objects and arrays; it read ${
          path.join(".") || "its input"
        } as a value to compute with, which SQL cannot replay. Compute it in a step before and pick that step's output`,
    );
  };
  const proxy: object = new Proxy(function () {}, {
    get(_target, key) {
      if (key === Symbol.toPrimitive || key === "toString" || key === "valueOf") return refuse;
      if (key === "toJSON" || key === "then" || typeof key === "symbol") return undefined;
      return recorder([...path, key], where);
    },
    apply: refuse,
    construct: refuse,
    has: refuse,
    ownKeys: refuse,
    set: refuse,
  });
  paths.set(proxy, path);
  return proxy;
}

/**
 * Records an input function as a {@link ChildInputMapping}; `undefined` (no function) gives
 * `null`. Throws a {@link FlowDefinitionError} naming the step for anything SQL cannot replay.
 */
export function recordChildInput(fn: unknown, where: string): ChildInputMapping | null {
  if (fn === undefined) return null;
  if (typeof fn !== "function") {
    throw new FlowDefinitionError(
      `${where}: input must be a function such as (deps) => ({ id: deps.fetch.id }), got ${typeof fn}`,
    );
  }
  let result: unknown;
  try {
    result = fn(recorder([], where));
  } catch (error) {
    if (error instanceof FlowDefinitionError) throw error;
    throw new FlowDefinitionError(
      `${where}: the input function failed when recorded (${
        error instanceof Error ? error.message : String(error)
      }); it may only pick values from its input and place them in objects and arrays`,
    );
  }
  const refs: [string[], string[]][] = [];
  const template = toTemplate(result, [], refs, where);
  return Object.freeze({ template, refs: Object.freeze(refs) });
}

function toTemplate(
  value: unknown,
  at: string[],
  refs: [string[], string[]][],
  where: string,
): Json {
  if (value !== null && (typeof value === "object" || typeof value === "function")) {
    const from = paths.get(value);
    if (from !== undefined) {
      refs.push([at, [...from]]);
      return null;
    }
  }
  if (Array.isArray(value)) {
    return value.map((item, i) => toTemplate(item, [...at, String(i)], refs, where));
  }
  if (
    value !== null && typeof value === "object" && Object.getPrototypeOf(value) === Object.prototype
  ) {
    const out: Record<string, Json> = {};
    for (const [key, item] of Object.entries(value)) {
      if (item === undefined) continue;
      out[key] = toTemplate(item, [...at, key], refs, where);
    }
    return out;
  }
  if (
    value === null || typeof value === "string" || typeof value === "boolean" ||
    (typeof value === "number" && Number.isFinite(value))
  ) return value;
  throw new FlowDefinitionError(
    `${where}: the input function returned ${
      typeof value === "number" ? String(value) : typeof value
    } at ${
      at.join(".") || "its top"
    }; return JSON (objects, arrays, strings, finite numbers, booleans, null) and values picked from the input`,
  );
}
