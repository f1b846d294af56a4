/**
 * Helpers of the `pgflow compile` and `pgflow plan` tests: a module of flows written to a
 * temporary folder (importing this checkout's mod.ts), and compiling flows as a worker would.
 *
 * @module
 */
import type postgres from "postgres";
import { createLogger } from "../../src/platform/logger.ts";
import type { CompilableFlow } from "../../src/compile/shape.ts";
import { compileDefinitions } from "../../src/worker/compile_at_start.ts";

const MOD = new URL("../../mod.ts", import.meta.url).href;

/**
 * Writes `body` as a module that imports `Flow`, `routeFlow` and `withStepQueues` from this
 * checkout, and returns its path.
 *
 * @example
 * ```ts
 * const path = await flowsModule(`export const f = new Flow({ slug: "x" }).step({ slug: "a" }, () => 1);`);
 * ```
 */
export async function flowsModule(body: string): Promise<string> {
  const dir = await Deno.makeTempDir({ prefix: "pgflow-flows-" });
  const path = `${dir}/flows.ts`;
  await Deno.writeTextFile(
    path,
    `// deno-lint-ignore-file\nimport { Flow, routeFlow, withStepQueues } from "${MOD}";\n${body}\n`,
  );
  return path;
}

/** Compiles definitions as a starting worker does (committed), logging nothing. */
export async function compileNow(sql: postgres.Sql, ...definitions: CompilableFlow[]) {
  await compileDefinitions(sql, definitions, createLogger({ sink: () => {} }));
}
