/**
 * Loading the flows a module exports, for `pgflow compile` and `pgflow plan`: every exported Flow,
 * `routeFlow(...)` and `withStepQueues(...)` value (and lists of them), one definition per concrete
 * slug, checked by the worker's own target rules (`resolveTarget`).
 *
 * @module
 */
import type { CompilableFlow } from "../../compile/shape.ts";
import {
  extractAlias,
  extractFlowOptions,
  extractFlowShape,
  extractRoutePlan,
} from "../../compile/shape.ts";
import { maskSecrets } from "../../platform/database_url.ts";
import { resolveTarget } from "../../worker/target.ts";
import type { WorkerTarget } from "../../routing/selection.ts";
import { CliError, UsageError } from "../output.ts";

/** One definition found in a module, with the export it came from. */
export interface LoadedFlow {
  /** The concrete flow slug. */
  readonly slug: string;
  /** The export that holds it (`default`, `triageV2`, `workers[1]`). */
  readonly exportName: string;
  /** The definition as a worker compiles it. */
  readonly definition: CompilableFlow;
}

/**
 * The URL to import for a module argument: a URL (file:, http:, https:, jsr:, npm:) as given, a
 * path relative to `cwd` otherwise.
 *
 * @example
 * ```ts
 * import { moduleUrl } from "./load.ts";
 *
 * moduleUrl("./flows.ts", "/app"); // "file:///app/flows.ts"
 * ```
 */
export function moduleUrl(spec: string, cwd: string = Deno.cwd()): string {
  if (/^(file|https?|jsr|npm):/.test(spec)) return spec;
  const absolute = spec.startsWith("/") ? spec : `${cwd.replace(/\/$/, "")}/${spec}`;
  return new URL(`file://${absolute.split("/").map(encodeURIComponent).join("/")}`).href;
}

/**
 * Imports `spec` and returns the flows it exports, in export order; `only` (slugs or export names)
 * narrows them. A module that cannot be found is a usage error; one that fails to load, exports
 * no flow, or exports two different definitions under one slug is a one-line error naming it.
 *
 * @example
 * ```ts
 * import { loadFlows } from "./load.ts";
 *
 * // const flows = await loadFlows("./supabase/functions/_flows/mod.ts", ["triage_v2"]);
 * ```
 */
export async function loadFlows(
  spec: string,
  only: readonly string[] = [],
): Promise<LoadedFlow[]> {
  const url = moduleUrl(spec);
  if (url.startsWith("file:")) {
    try {
      await Deno.stat(new URL(url));
    } catch {
      throw new UsageError(`module ${spec} not found (looked for ${new URL(url).pathname})`);
    }
  }
  let exports: Record<string, unknown>;
  try {
    exports = await import(url);
  } catch (error) {
    throw new CliError(`module ${spec} does not load: ${loadErrorText(error)}`);
  }
  const found = collect(exports, spec);
  if (found.length === 0) {
    throw new CliError(
      `module ${spec} exports no flow: export each Flow, routeFlow(...) or withStepQueues(...) ` +
        "value the workers start (e.g. `export const triage = routeFlow(flow, { queues })`)",
    );
  }
  const unknown = only.filter((name) =>
    !found.some((f) => f.slug === name || f.exportName === name)
  );
  if (unknown.length > 0) {
    throw new UsageError(
      `--flow ${unknown.map((n) => JSON.stringify(n)).join(", ")} is not a flow of ${spec}; its ` +
        `flows are ${found.map((f) => `${f.slug} (export ${f.exportName})`).join(", ")}`,
    );
  }
  return dedupe(
    only.length === 0
      ? found
      : found.filter((f) => only.includes(f.slug) || only.includes(f.exportName)),
    spec,
  );
}

/**
 * The first line of a module's load error, and of its cause, with every password masked: the
 * module may have failed on a database URL and echoed it (Deno's `Invalid URL: '…'`). Masked
 * before it is cut, so no cut leaves part of a password unmasked.
 */
function loadErrorText(error: unknown): string {
  const firstLine = (e: unknown) => (e instanceof Error ? e.message : String(e)).split("\n")[0];
  const cause = error instanceof Error && error.cause !== undefined
    ? ` (cause: ${firstLine(error.cause)})`
    : "";
  const line = maskSecrets(firstLine(error) + cause);
  return line.length > 300 ? `${line.slice(0, 290)} … [cut]` : line;
}

function isTarget(value: unknown): boolean {
  if (typeof value !== "object" || value === null) return false;
  const v = value as { mode?: unknown; stepOrder?: unknown; steps?: unknown; flow?: unknown };
  if ((v.mode === "routed" || v.mode === "step") && typeof v.flow === "object") return true;
  return Array.isArray(v.stepOrder) && typeof v.steps === "function";
}

/** Each exported target, checked and unwrapped into its definitions by the worker's rules. */
function collect(exports: Record<string, unknown>, spec: string): LoadedFlow[] {
  const found: LoadedFlow[] = [];
  const add = (value: unknown, exportName: string) => {
    let definitions: readonly CompilableFlow[];
    try {
      definitions = resolveTarget(value as WorkerTarget, selectionFor(value)).definitions;
    } catch (error) {
      throw new CliError(`module ${spec}: export ${exportName}: ${(error as Error).message}`);
    }
    for (const definition of definitions) {
      found.push({ slug: definition.slug, exportName, definition });
    }
  };
  for (const [name, value] of Object.entries(exports)) {
    if (isTarget(value)) add(value, name);
    else if (Array.isArray(value) && value.length > 0 && value.every(isTarget)) {
      value.forEach((item, i) => add(item, `${name}[${i}]`));
    }
  }
  return found;
}

/** A selection resolveTarget accepts for this target, so every definition of it comes back. */
function selectionFor(value: unknown): { queueName?: string; stepSlug?: string } {
  const v = value as { mode?: string; queues?: Record<string, string>; flow?: unknown };
  if (v.mode === "routed") return { queueName: Object.values(v.queues ?? {})[0] };
  if (v.mode === "step") return { stepSlug: Object.keys(v.queues ?? {})[0] };
  return {};
}

/** What the database receives for a definition: equal keys mean one definition. */
function compileKey(definition: CompilableFlow): string {
  return JSON.stringify([
    extractFlowShape(definition),
    extractRoutePlan(definition),
    extractFlowOptions(definition),
    extractAlias(definition),
  ]);
}

function unwrap(definition: CompilableFlow): object {
  const d = definition as { mode?: string; flow?: object };
  return d.mode === "routed" || d.mode === "step" ? d.flow! : definition;
}

/**
 * One definition per slug (case-insensitively, as SQL compares them). A module may export a flow
 * next to its routeFlow()/withStepQueues() form: the routed form is what workers start, so it
 * wins. Two different definitions of one slug cannot both be deployed: an error names them.
 */
function dedupe(found: readonly LoadedFlow[], spec: string): LoadedFlow[] {
  const groups = new Map<string, LoadedFlow[]>();
  for (const f of found) {
    const key = f.slug.toLowerCase();
    groups.set(key, [...(groups.get(key) ?? []), f]);
  }
  const out: LoadedFlow[] = [];
  for (const group of groups.values()) {
    const wrapped = group.filter((f) => unwrap(f.definition) !== f.definition);
    const plainOfWrapped = (f: LoadedFlow) =>
      unwrap(f.definition) === f.definition &&
      wrapped.some((w) => unwrap(w.definition) === f.definition);
    const kept = group.filter((f) => !plainOfWrapped(f));
    const distinct = new Set(kept.map((f) => compileKey(f.definition)));
    if (distinct.size > 1 || new Set(kept.map((f) => f.slug)).size > 1) {
      throw new CliError(
        `module ${spec} exports different definitions of flow ${group[0].slug} (${
          kept.map((f) => `export ${f.exportName}`).join(", ")
        }); a slug has one definition: name one with --flow EXPORT, or give the other a new slug`,
      );
    }
    out.push(kept[0]);
  }
  return out;
}
